"""Tensor descriptors, parallel axes, ranks and address-free placement fragments."""

from dataclasses import dataclass
from math import prod
from typing import Optional, Union

from ..contracts import PlacementFragmentId, RuntimeBindingFragment, TensorId
from . import _checks as _c

AXIS_ORDER = {"dp": 0, "pp": 1, "ep": 2, "tp": 3}


def _axis_kind(kind):
    _c.text(kind, "parallel axis kind")
    if kind not in AXIS_ORDER:
        raise ValueError(f"unsupported parallel axis kind: {kind}")


@dataclass(frozen=True)
class ParallelRank:
    """A participant's dp/tp/pp/ep coordinates (routing only: geometry lives in the fragments)."""

    dp: int = 0
    tp: int = 0
    pp: int = 0
    ep: int = 0

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "ep"):
            _c.integer(getattr(self, name), f"parallel rank {name}", 0)


@dataclass(frozen=True)
class SplitAxis:
    """A tp or ep axis whose ranks partition logical dimension ``dim`` (ep: always dim 0)."""

    kind: str
    dim: int

    def __post_init__(self):
        _axis_kind(self.kind)
        if self.kind not in ("ep", "tp"):
            raise ValueError(f"{self.kind} cannot use split semantics")
        _c.integer(self.dim, "split axis dim", 0)
        if self.kind == "ep" and self.dim != 0:
            raise ValueError("EP must split the leading logical expert dimension")


@dataclass(frozen=True)
class ReplicatedAxis:
    """An axis whose every rank holds a complete copy."""

    kind: str

    def __post_init__(self):
        _axis_kind(self.kind)


@dataclass(frozen=True)
class OwnershipAxis:
    """An axis where only the declared owner ranks hold the tensor."""

    kind: str

    def __post_init__(self):
        _axis_kind(self.kind)


ParallelAxis = Union[SplitAxis, ReplicatedAxis, OwnershipAxis]


def axis_identity(axis):
    if isinstance(axis, SplitAxis):
        return {"semantics": "split", "kind": axis.kind, "dim": axis.dim}
    if isinstance(axis, ReplicatedAxis):
        return {"semantics": "replicated", "kind": axis.kind}
    if isinstance(axis, OwnershipAxis):
        return {"semantics": "ownership", "kind": axis.kind}
    raise ValueError("unsupported parallel axis value")


@dataclass(frozen=True)
class TensorDescriptor:
    """One logical tensor: identity, full shape, dtype, layout and its parallel axes."""

    tensor_id: TensorId
    global_shape: tuple
    dtype: str
    itemsize: int
    shard_dims: tuple
    layout_fingerprint: str
    parallel_axes: tuple
    layer_id: Optional[int] = None
    expert_id: Optional[int] = None

    def __post_init__(self):
        shape = _c.integers(self.global_shape, "global_shape", 1)
        if not shape:
            raise ValueError("global_shape must not be empty")
        object.__setattr__(self, "global_shape", shape)
        _c.text(self.tensor_id, "tensor_id")
        _c.text(self.dtype, "dtype")
        _c.integer(self.itemsize, "itemsize", 1)
        dims = _c.integers(self.shard_dims, "shard_dims", 0)
        if len(set(dims)) != len(dims):
            raise ValueError("shard_dims must not contain duplicates")
        if list(dims) != sorted(dims):
            raise ValueError("shard_dims must be sorted")
        if any(d >= len(shape) for d in dims):
            raise ValueError("shard_dims contains an out-of-range dimension")
        object.__setattr__(self, "shard_dims", dims)
        axes = tuple(_c.sequence(self.parallel_axes, "TensorDescriptor parallel_axes"))
        if any(not isinstance(a, (SplitAxis, ReplicatedAxis, OwnershipAxis)) for a in axes):
            raise ValueError("TensorDescriptor parallel_axes must contain explicit axis values")
        axes = tuple(sorted(axes, key=lambda a: AXIS_ORDER[a.kind]))
        kinds = [a.kind for a in axes]
        if len(set(kinds)) != len(kinds):
            raise ValueError("parallel_axes must not contain duplicate kinds")
        split = [a.dim for a in axes if isinstance(a, SplitAxis)]
        if len(set(split)) != len(split):
            raise ValueError("split axes must not share a dimension")
        if any(d >= len(shape) for d in split):
            raise ValueError("split axis dimension is out of range")
        if tuple(sorted(split)) != dims:
            raise ValueError("parallel axis split dimensions conflict with shard_dims")
        object.__setattr__(self, "parallel_axes", axes)
        for name in ("layer_id", "expert_id"):
            if getattr(self, name) is not None:
                _c.integer(getattr(self, name), name, 0)
        if self.expert_id is not None and any(isinstance(a, SplitAxis) and a.kind == "ep" for a in axes):
            raise ValueError("an individually allocated expert requires explicit EP ownership")
        _c.text(self.layout_fingerprint, "layout_fingerprint")

    def identity(self):
        return {"tensor_id": self.tensor_id, "global_shape": list(self.global_shape), "dtype": self.dtype,
                "itemsize": self.itemsize, "shard_dims": list(self.shard_dims),
                "layout_fingerprint": self.layout_fingerprint,
                "parallel_axes": [axis_identity(a) for a in self.parallel_axes],
                "layer_id": self.layer_id, "expert_id": self.expert_id}


def validate_fragment_geometry(tensor, *, fragment_id, global_offset, local_shape, nbytes):
    """A box of the tensor's rank inside its shape whose byte size matches."""
    ndim = len(tensor.global_shape)
    if len(global_offset) != ndim or len(local_shape) != ndim:
        raise ValueError(f"fragment rank mismatch: {fragment_id}")
    if any(o + n > t for o, n, t in zip(global_offset, local_shape, tensor.global_shape)):
        raise ValueError(f"fragment is out of bounds: {fragment_id}")
    expected = prod(local_shape) * tensor.itemsize
    if nbytes != expected:
        raise ValueError(f"fragment byte size mismatch: {fragment_id}: expected {expected}, got {nbytes}")


def canonical_strides_bytes(shape, itemsize):
    """Row-major contiguous byte strides of ``shape``."""
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def require_manifest_items(value, name, item_type):
    """``value`` as a tuple, ValueError unless it is a sequence of ``item_type``."""
    return _c.items(value, name, item_type)


def require_sha256_digest(value, name):
    """ValueError unless ``value`` is a lowercase hex SHA-256 digest."""
    _c.sha256_hex(value, name)


def _aliases(value):
    got = tuple(_c.sequence(value, "aliases"))
    if any(type(a) is not str or not a for a in got):
        raise ValueError("aliases must contain non-empty strings")
    if len(set(got)) != len(got):
        raise ValueError("aliases must not contain duplicates")
    return tuple(sorted(got))


def fragment_identity(tensor_id, global_offset, local_shape, nbytes, rank, pipeline_stage_id, aliases):
    content = {"tensor_id": tensor_id, "global_offset": list(global_offset), "local_shape": list(local_shape),
               "nbytes": nbytes, "rank": _c.rank_dict(rank), "aliases": list(aliases)}
    if pipeline_stage_id is not None:
        content["pipeline_stage_id"] = pipeline_stage_id
    return content


@dataclass(frozen=True, init=False)
class PlacementFragment:
    """An address-free N-D box of one tensor held by one parallel rank."""

    tensor_id: TensorId
    global_offset: tuple
    local_shape: tuple
    nbytes: int
    rank: ParallelRank
    pipeline_stage_id: Optional[int]
    aliases: tuple
    placement_fragment_id: PlacementFragmentId

    def __init__(self, tensor_id, global_offset, local_shape, nbytes, rank, pipeline_stage_id=None, aliases=(),
                 placement_fragment_id=None):
        offset = _c.integers(global_offset, "global_offset", 0)
        shape = _c.integers(local_shape, "local_shape", 1)
        _c.text(tensor_id, "tensor_id")
        _c.u64(nbytes, "nbytes", 1)
        if not isinstance(rank, ParallelRank):
            raise ValueError("rank must be a ParallelRank")
        if pipeline_stage_id is not None:
            _c.integer(pipeline_stage_id, "pipeline_stage_id", 0)
        group = _aliases(aliases)
        if group:
            if len(group) < 2:
                raise ValueError("alias group must contain at least two tensor IDs")
            if tensor_id not in group:
                raise ValueError("alias group must contain the fragment tensor_id")
        if placement_fragment_id is None:
            content = fragment_identity(tensor_id, offset, shape, nbytes, rank, pipeline_stage_id, group)
            content["schema"] = "weight-placement-fragment"
            placement_fragment_id = "sha256:" + _c.digest_of(content)
        else:
            _c.text(placement_fragment_id, "placement_fragment_id")
        for name, value in (("tensor_id", tensor_id), ("global_offset", offset), ("local_shape", shape),
                            ("nbytes", nbytes), ("rank", rank), ("pipeline_stage_id", pipeline_stage_id),
                            ("aliases", group), ("placement_fragment_id", placement_fragment_id)):
            object.__setattr__(self, name, value)

    @property
    def fragment_id(self):
        return self.placement_fragment_id

    def identity(self):
        out = fragment_identity(self.tensor_id, self.global_offset, self.local_shape, self.nbytes, self.rank,
                                self.pipeline_stage_id, self.aliases)
        out["placement_fragment_id"] = self.placement_fragment_id
        return out


__all__ = ["OwnershipAxis", "ParallelAxis", "ParallelRank", "PlacementFragment", "ReplicatedAxis",
           "RuntimeBindingFragment", "SplitAxis", "TensorDescriptor", "canonical_strides_bytes",
           "require_manifest_items", "require_sha256_digest", "validate_fragment_geometry"]
