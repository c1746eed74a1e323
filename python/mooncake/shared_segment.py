"""mooncake.shared_segment: process-shared host memory for a group of ranks (Mooncake's module).

KV that every rank of a tensor-parallel group keeps identically (MLA) is offloaded once: the
``owner_rank`` allocates the pages and every rank maps them, and each rank gets zero-copy torch
views of the same bytes::

    seg = create_shared_segment("kv", blocks={"k": dict(count=layers, shape=k_shape, dtype=torch.bfloat16),
                                              "v": dict(count=layers, shape=v_shape, dtype=torch.bfloat16)},
                                world_size=tp_size, rank_id=tp_rank, comm_group=tp_group)
    k_caches = seg.tensors("k")

Every rank must declare the same blocks (the layout is folded into the segment's name, so
ranks that disagree fail ``complete``); the blobs of the two phases of
``mooncake.engine.SharedSegment`` are all-gathered over ``comm_group`` (a torch process group
or anything with a ``cpu_group``, e.g. vLLM's GroupCoordinator), and a failure on any rank is
raised on every rank. Layout: entry ``i`` of every block, in sorted block order, each aligned
to 4 KiB, then entry ``i + 1``. Host memory only (``mmap=True``): the device paths
(``mmap=False``, ``host_register=True``) raise ``SharedSegmentError``, as a Mooncake build
without them does. The ranks must share one host.
"""

import ctypes
import math
from dataclasses import dataclass

from .engine import SharedSegment as _EngineSegment

__all__ = ["SharedSegment", "SharedSegmentError", "create_shared_segment", "shared_segment_supported"]

_ALIGN = 4096


class SharedSegmentError(RuntimeError):
    """A shared segment could not be created or addressed."""


@dataclass(frozen=True)
class _Block:
    count: int
    shape: tuple
    dtype: object
    nbytes: int


def shared_segment_supported(mmap=True, host_register=False):
    return _EngineSegment.supported(mmap, host_register)


def _align(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _parse(name, spec):
    import torch

    try:
        count, shape, dtype = int(spec["count"]), tuple(int(d) for d in spec["shape"]), spec["dtype"]
    except (KeyError, TypeError, ValueError) as exc:
        raise SharedSegmentError("Block %r needs count, shape and dtype: %s" % (name, exc))
    if count <= 0:
        raise SharedSegmentError("Block %r needs a positive count" % name)
    if not shape or any(d <= 0 for d in shape):
        raise SharedSegmentError("Block %r needs a positive shape" % name)
    if not isinstance(dtype, torch.dtype):
        raise SharedSegmentError("Block %r needs a torch dtype" % name)
    itemsize = torch.empty((), dtype=dtype).element_size()
    return _Block(count, shape, dtype, math.prod(shape) * itemsize)


def _cpu_group(comm_group):
    return getattr(comm_group, "cpu_group", comm_group)


def _gather(value, world_size, comm_group):
    if world_size == 1:
        return [value]
    if comm_group is None:
        raise SharedSegmentError("comm_group is required when world_size > 1")
    import torch.distributed as dist

    out = [None] * world_size
    dist.all_gather_object(out, value, group=_cpu_group(comm_group))
    return out


def _raise_if_any_failed(error, world_size, comm_group, phase):
    errors = _gather(error, world_size, comm_group)
    failed = ["rank %d: %s" % (r, e) for r, e in enumerate(errors) if e]
    if failed:
        raise SharedSegmentError("Shared segment %s failed: %s" % (phase, "; ".join(failed)))


class SharedSegment(object):
    """One shared segment: ``tensors(block)``, ``base_addr()``, ``total_size()``."""

    def __init__(self, segment, specs, offsets, stride, device_id):
        self._segment, self._specs, self._offsets = segment, specs, offsets
        self._stride, self._device_id = stride, device_id

    def tensors(self, block):
        """Zero-copy CPU views of every entry of block, in index order (each keeps the segment alive)."""
        import torch

        spec = self._specs.get(block)
        if spec is None:
            raise SharedSegmentError("Unknown shared segment block %r" % (block,))
        base = int(self._segment.base_addr())
        views = []
        for i in range(spec.count):
            raw = (ctypes.c_ubyte * spec.nbytes).from_address(base + self._offsets[block] + i * self._stride)
            t = torch.frombuffer(raw, dtype=spec.dtype).view(spec.shape)
            t._mooncake_shared_segment = self
            views.append(t)
        return views

    def base_addr(self):
        return self._segment.base_addr()

    def total_size(self):
        return self._segment.size()


def create_shared_segment(name, blocks, world_size, rank_id, owner_rank=0, device_id=None, comm_group=None,
                          mmap=True, host_register=False, *, tp_group=None):
    """Creates the segment on every rank of the group (call it on each with the same blocks)."""
    if comm_group is not None and tp_group is not None and comm_group is not tp_group:
        raise SharedSegmentError("pass comm_group or tp_group (its deprecated alias), not both")
    comm_group = comm_group if comm_group is not None else tp_group
    if host_register and not mmap:
        raise SharedSegmentError("host_register requires mmap=True")
    if not shared_segment_supported(mmap=mmap, host_register=host_register):
        raise SharedSegmentError("This build shares host memory only (mmap=True, host_register=False)")
    if world_size > 1 and comm_group is None:
        raise SharedSegmentError("comm_group is required when world_size > 1")
    names = sorted(blocks)
    if not names:
        raise SharedSegmentError("Shared segment needs at least one block")
    specs = {n: _parse(n, blocks[n]) for n in names}
    offsets, stride = {}, 0
    for n in names:
        offsets[n] = stride
        stride += _align(specs[n].nbytes)
    total = stride * max(s.count for s in specs.values())
    tag = ";".join("%s:%d:%s:%s" % (n, specs[n].count, "x".join(map(str, specs[n].shape)), specs[n].dtype)
                   for n in names)
    if device_id is None:
        device_id = 0
    segment, blob, error = None, b"", ""
    try:
        segment, blob = _EngineSegment.create("%s|%s" % (name, tag), total, world_size, rank_id, owner_rank,
                                              device_id, mmap, host_register)
    except RuntimeError as exc:
        error = str(exc)
    _raise_if_any_failed(error, world_size, comm_group, "create")
    error = ""
    try:
        segment.complete(_gather(blob, world_size, comm_group))
    except (RuntimeError, SharedSegmentError) as exc:
        error = str(exc)
    _raise_if_any_failed(error, world_size, comm_group, "complete")
    return SharedSegment(segment, specs, offsets, stride, device_id)
