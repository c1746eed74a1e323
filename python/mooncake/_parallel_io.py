"""Layout helpers of the unified parallel tensor calls (*_tensor_with_parallelism).

Shards follow torch's ``chunk`` rule, as Mooncake's: a dimension of n split
``count`` ways gives chunks of ceil(n / count) elements, the last one shorter
and trailing ranks possibly empty (absent). A writer also records how the
tensor was split in a manifest object next to its shards
(``<key>__parallelism_manifest`` for parallelism writes,
``<key>__writer_manifest`` for writer-partition writes) so a reader that asks
for the full tensor, or for a shard of another TP size, can rebuild it. The
manifest's body is this package's (a small JSON document), not Mooncake's
binary one: the shard objects and their keys are Mooncake's, the manifests
are read only by this package.
"""

import json

from . import _tensor as T

MANIFEST_MAGIC = "mooncake-go/parallel-manifest"


def chunk_bounds(dim, count):
    """[(start, length)] of the non-empty torch.chunk pieces of dim split count ways."""
    if count <= 0:
        raise T.TensorError("shard count must be positive")
    if dim == 0:
        return [(0, 0)]
    step = -(-dim // count)
    out = []
    start = 0
    while start < dim:
        out.append((start, min(step, dim - start)))
        start += step
    return out


def chunk(t, split_dim, rank, count):
    """torch.chunk(t, count, split_dim)[rank] as a contiguous tensor; TensorError if out of range."""
    shape = T.shape_of(t)
    if not (0 <= split_dim < len(shape)):
        raise T.TensorError("split_dim %d out of range for a %d-d tensor" % (split_dim, len(shape)))
    bounds = chunk_bounds(shape[split_dim], count)
    if not (0 <= rank < count):
        raise T.TensorError("rank %d of %d is invalid" % (rank, count))
    # ranks past the last chunk hold an empty shard
    start, size = bounds[rank] if rank < len(bounds) else (shape[split_dim], 0)
    if T._is_torch(t):
        return t.narrow(split_dim, start, size).contiguous()
    idx = [slice(None)] * len(shape)
    idx[split_dim] = slice(start, start + size)
    return T.np.ascontiguousarray(t[tuple(idx)])


def require_uniform(shape, split_dim, count, what):
    """TensorError unless dim split_dim of shape splits into count equal shards (Mooncake
    materializes only uniform shards of a whole tensor)."""
    if shape[split_dim] % count:
        raise T.TensorError("%s: dim %d of size %d does not split evenly into %d shards" % (
            what, split_dim, shape[split_dim], count))


def axis_dict(ax):
    return {"kind": ax.kind, "rank": ax.rank, "size": ax.size, "split_dim": ax.split_dim,
            "expert_id": ax.expert_id, "stage_id": ax.stage_id}


def encode_manifest(kind, global_shape, dtype, axes=None, writer=None):
    doc = {"magic": MANIFEST_MAGIC, "kind": kind, "shape": [int(d) for d in global_shape], "dtype": int(dtype)}
    if axes is not None:
        doc["axes"] = [axis_dict(a) for a in axes]
    if writer is not None:
        doc["writer"] = {"size": writer[1], "split_dim": writer[2]}
    return bytearray(json.dumps(doc, sort_keys=True).encode())


def decode_manifest(data, n):
    """The manifest document, or None when data is not one."""
    try:
        doc = json.loads(bytes(data[:n]).decode())
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("magic") != MANIFEST_MAGIC:
        return None
    return doc


def manifest_key(key):
    return key + "__parallelism_manifest"


def writer_manifest_key(key):
    return key + "__writer_manifest"
