"""The logical plan's data: regions, limits, executors, pipeline route groups, and the plan.

A ``LogicalTransferPlan`` checks itself on construction (and again when unpickled): one source
provenance (a placement or a stored manifest snapshot), matching identities, canonical regions
within the limits, executor metadata that matches the placements, and every selected target
fragment exactly covered by its regions.
"""

from dataclasses import dataclass, field
from math import prod
from types import MappingProxyType
from typing import ClassVar, Generic, Optional, TypeVar

from ...geometry import box_contains
from ..placement import WeightPlacementManifest
from ..storage_manifest import StoredFragment, WeightManifest, validate_weight_manifest_snapshot
from ..types import ParallelRank, PlacementFragment
from .geometry import _derive_region_geometry, _fragment_itemsize, _validate_outer_strides

_S = TypeVar("_S")
_T = TypeVar("_T")


def _nonneg_opt(value):
    return value is None or (type(value) is int and value >= 0)


@dataclass(frozen=True)
class PipelineRouteGroup:
    """The indices of the operations that go from one source PP owner (and stage) to one target."""

    source_pp: Optional[int]
    source_pipeline_stage_id: Optional[int]
    target_pp: int
    target_pipeline_stage_id: Optional[int]
    operation_indices: tuple

    def __post_init__(self):
        object.__setattr__(self, "operation_indices", tuple(self.operation_indices))
        if not _nonneg_opt(self.source_pp):
            raise ValueError("pipeline route source_pp must be non-negative")
        if type(self.target_pp) is not int or self.target_pp < 0:
            raise ValueError("pipeline route target_pp must be non-negative")
        for name in ("source_pipeline_stage_id", "target_pipeline_stage_id"):
            if not _nonneg_opt(getattr(self, name)):
                raise ValueError(f"pipeline route {name} must be non-negative")
        if any(type(i) is not int or i < 0 for i in self.operation_indices):
            raise ValueError("pipeline route indices must be non-negative integers")
        if len(set(self.operation_indices)) != len(self.operation_indices):
            raise ValueError("pipeline route has duplicate operation indices")


@dataclass(frozen=True)
class PlanningLimits:
    """Bounds on regions and on their later expansion into flat segments."""

    max_transfer_regions: int = 1_000_000
    max_segments_per_region: int = 1_000_000
    max_total_lowered_segments: int = 10_000_000

    def __post_init__(self):
        for name in ("max_transfer_regions", "max_segments_per_region", "max_total_lowered_segments"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"planning limit {name} must be a positive integer")


def _end(base, counts, strides, inner):
    return base + sum((c - 1) * s for c, s in zip(counts, strides)) + inner


@dataclass(frozen=True)
class TransferRegion(Generic[_S, _T]):
    """One source/target box overlap as ``prod(outer_loop_counts)`` runs of ``inner_bytes``.

    The fields must be the canonical geometry of the overlap (checked on construction)."""

    tensor_id: str
    source: _S
    target: _T
    overlap_offset: tuple
    overlap_shape: tuple
    source_base_offset: int
    target_base_offset: int
    inner_bytes: int
    outer_loop_counts: tuple
    source_strides: tuple
    target_strides: tuple

    def __post_init__(self):
        for name in ("overlap_offset", "overlap_shape", "outer_loop_counts", "source_strides", "target_strides"):
            value = getattr(self, name)
            try:
                if isinstance(value, (str, bytes, bytearray)):
                    raise TypeError
                value = tuple(value)
            except TypeError as error:
                raise ValueError(f"transfer region {name} must contain integers") from error
            if any(type(v) is not int for v in value):
                raise ValueError(f"transfer region {name} must contain integers")
            object.__setattr__(self, name, value)
        if not self.tensor_id:
            raise ValueError("transfer region tensor_id must not be empty")
        if self.source.tensor_id != self.tensor_id or self.target.tensor_id != self.tensor_id:
            raise ValueError("transfer region tensor mismatch")
        ndim = len(self.overlap_offset)
        if not ndim or ndim != len(self.overlap_shape) or ndim != len(self.source.global_offset) \
                or ndim != len(self.target.global_offset):
            raise ValueError("transfer region logical rank mismatch")
        if any(o < 0 for o in self.overlap_offset) or any(n <= 0 for n in self.overlap_shape):
            raise ValueError("transfer region logical box is invalid")
        for side in ("source", "target"):
            frag = getattr(self, side)
            if not box_contains(frag.global_offset, frag.local_shape, self.overlap_offset, self.overlap_shape):
                raise ValueError(f"transfer region exceeds {side} logical fragment")
        for name in ("source_base_offset", "target_base_offset", "inner_bytes"):
            if type(getattr(self, name)) is not int:
                raise ValueError(f"transfer region {name} must be an integer")
        if self.source_base_offset < 0 or self.target_base_offset < 0:
            raise ValueError("transfer region base offsets must be non-negative")
        if self.inner_bytes <= 0:
            raise ValueError("transfer region inner_bytes must be positive")
        if not len(self.outer_loop_counts) == len(self.source_strides) == len(self.target_strides):
            raise ValueError("transfer region outer loop rank mismatch")
        if any(c <= 0 for c in self.outer_loop_counts):
            raise ValueError("transfer region outer loop counts must be positive")
        if any(s < 0 for s in self.source_strides + self.target_strides):
            raise ValueError("transfer region strides must be non-negative")
        itemsize = _fragment_itemsize(self.source)
        if _fragment_itemsize(self.target) != itemsize:
            raise ValueError("transfer region source and target itemsize differ")
        s_base, t_base, inner, counts, s_strides, t_strides = _derive_region_geometry(
            self.source, self.target, self.overlap_offset, self.overlap_shape)
        if self.total_bytes != prod(self.overlap_shape) * itemsize:
            raise ValueError("transfer region loop geometry does not match overlap")
        if self.source_base_offset != s_base:
            raise ValueError("transfer region source base offset is inconsistent")
        if self.target_base_offset != t_base:
            raise ValueError("transfer region target base offset is inconsistent")
        if (self.inner_bytes, self.outer_loop_counts, self.source_strides, self.target_strides) != \
                (inner, counts, s_strides, t_strides):
            raise ValueError("transfer region loop geometry is not canonical")
        _validate_outer_strides(self.outer_loop_counts, self.source_strides, self.inner_bytes, "source")
        _validate_outer_strides(self.outer_loop_counts, self.target_strides, self.inner_bytes, "target")
        self.validate_bounds()

    @property
    def segment_count(self):
        return prod(self.outer_loop_counts)

    @property
    def total_bytes(self):
        return self.inner_bytes * self.segment_count

    @property
    def source_offset(self):
        return self.source_base_offset

    @property
    def target_offset(self):
        return self.target_base_offset

    @property
    def nbytes(self):
        return self.inner_bytes

    @property
    def repeat(self):
        return self.segment_count

    def _single_stride(self, strides, side):
        if len(strides) > 1:
            raise ValueError(f"N-D transfer region has multiple {side} strides")
        return strides[0] if strides else 0

    @property
    def source_stride(self):
        return self._single_stride(self.source_strides, "source")

    @property
    def target_stride(self):
        return self._single_stride(self.target_strides, "target")

    def validate_bounds(self):
        if _end(self.source_base_offset, self.outer_loop_counts, self.source_strides,
                self.inner_bytes) > self.source.nbytes:
            raise ValueError("transfer region exceeds source fragment")
        if _end(self.target_base_offset, self.outer_loop_counts, self.target_strides,
                self.inner_bytes) > self.target.nbytes:
            raise ValueError("transfer region exceeds target fragment")

    def iter_segments(self, *, max_segments):
        """Yield (source_offset, target_offset, nbytes) per contiguous run, row-major order; the
        bound is checked when iteration starts (ValueError past ``max_segments``)."""
        if type(max_segments) is not int or max_segments <= 0:
            raise ValueError("max_segments must be a positive integer")
        if self.segment_count > max_segments:
            raise ValueError(f"transfer region exceeds max_segments: {self.segment_count} > {max_segments}")
        counts = self.outer_loop_counts
        index = [0] * len(counts)
        while True:
            yield (self.source_base_offset + sum(i * s for i, s in zip(index, self.source_strides)),
                   self.target_base_offset + sum(i * s for i, s in zip(index, self.target_strides)),
                   self.inner_bytes)
            d = len(counts) - 1
            while d >= 0:
                index[d] += 1
                if index[d] < counts[d]:
                    break
                index[d] = 0
                d -= 1
            if d < 0:
                return


LogicalTransferRegion = TransferRegion
LogicalTransferOperation = TransferRegion
RuntimeTensorOwner = tuple


@dataclass(frozen=True)
class PlacementExecutorPlan:
    """One participant that reads (source) or writes (target) in a plan, with all its fragment ids."""

    placement_id: str
    participant_id: str
    rank: ParallelRank
    placement_fragment_ids: tuple

    def __post_init__(self):
        object.__setattr__(self, "placement_fragment_ids", tuple(self.placement_fragment_ids))
        if not self.placement_id or not self.participant_id or not self.placement_fragment_ids:
            raise ValueError("placement executor identifiers must not be empty")
        if len(set(self.placement_fragment_ids)) != len(self.placement_fragment_ids):
            raise ValueError("placement executor has duplicate fragment IDs")


def _executor_key(e):
    return (e.placement_id, e.participant_id, e.rank, e.placement_fragment_ids)


def _index_operations(operations, executors, side):
    by_executor = {}
    by_fragment = {}
    for e in executors:
        key = _executor_key(e)
        if key in by_executor:
            raise ValueError("transfer plan has duplicate executor projection key")
        by_executor[key] = []
        for fid in e.placement_fragment_ids:
            by_fragment.setdefault(fid, []).append(key)
    for i, op in enumerate(operations):
        frag = getattr(op, side)
        if isinstance(frag, PlacementFragment):
            for key in by_fragment.get(frag.placement_fragment_id, ()):
                by_executor[key].append(i)
    return MappingProxyType({k: tuple(v) for k, v in by_executor.items()})


def _none_last(v):
    return -1 if v is None else v


def _pipeline_routes(operations):
    routes = {}
    for i, op in enumerate(operations):
        src = op.source if isinstance(op.source, PlacementFragment) else None
        key = (src.rank.pp if src else None, src.pipeline_stage_id if src else None, op.target.rank.pp,
               op.target.pipeline_stage_id)
        routes.setdefault(key, []).append(i)
    ordered = sorted(routes.items(), key=lambda kv: (_none_last(kv[0][0]), _none_last(kv[0][1]), kv[0][2],
                                                     _none_last(kv[0][3])))
    return tuple(PipelineRouteGroup(source_pp=k[0], source_pipeline_stage_id=k[1], target_pp=k[2],
                                    target_pipeline_stage_id=k[3], operation_indices=tuple(v)) for k, v in ordered)


@dataclass(frozen=True)
class _OperationViews:
    source_indices: object
    target_indices: object
    pipeline_routes: tuple


def _check_operation(op, placement_source):
    if not isinstance(op, TransferRegion):
        raise ValueError("logical transfer plan requires a canonical transfer operation")
    if not isinstance(op.target, PlacementFragment):
        raise ValueError("logical transfer plan target must be a placement")
    if placement_source:
        if not isinstance(op.source, PlacementFragment):
            raise ValueError("logical transfer plan source must be a placement")
    elif not isinstance(op.source, StoredFragment):
        raise ValueError("logical transfer plan source has no placement")
    op.validate_bounds()


def _tensor_catalog(tensors):
    return tuple(sorted(tensors, key=lambda t: t.tensor_id))


@dataclass(frozen=True)
class LogicalTransferPlan:
    """An address-free plan: canonical tensors, the executors involved and N-D regions."""

    _operation_views: ClassVar[_OperationViews]
    resource_id: str
    revision: str
    source_placement: Optional[WeightPlacementManifest]
    target_placement: WeightPlacementManifest
    source_tensors: tuple
    target_tensors: tuple
    operations: tuple
    source_manifest: Optional[WeightManifest] = None
    planning_limits: PlanningLimits = field(default_factory=PlanningLimits)
    source_executors: tuple = ()
    target_executors: tuple = ()
    source_manifest_identity: Optional[object] = field(init=False)

    def __post_init__(self):
        for name in ("source_tensors", "target_tensors", "operations", "source_executors", "target_executors"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.resource_id or not self.revision:
            raise ValueError("logical transfer plan identifiers must not be empty")
        if not isinstance(self.target_placement, WeightPlacementManifest):
            raise ValueError("logical transfer plan target placement is invalid")
        if not isinstance(self.planning_limits, PlanningLimits):
            raise ValueError("logical transfer plan planning_limits is invalid")
        limits = self.planning_limits
        if len(self.operations) > limits.max_transfer_regions:
            raise ValueError("logical transfer plan exceeds max_transfer_regions")
        if self.source_placement is not None and not isinstance(self.source_placement, WeightPlacementManifest):
            raise ValueError("logical transfer plan source placement is invalid")
        if self.source_manifest is not None and not isinstance(self.source_manifest, WeightManifest):
            raise ValueError("logical transfer plan source manifest is invalid")
        if (self.source_placement is None) == (self.source_manifest is None):
            raise ValueError("logical transfer plan requires exactly one source provenance")
        identity = None
        if self.source_manifest is not None:
            snapshot = validate_weight_manifest_snapshot(self.source_manifest)
            object.__setattr__(self, "source_manifest", snapshot)
            identity = snapshot.manifest_identity
        object.__setattr__(self, "source_manifest_identity", identity)
        for side, placement in (("source", self.source_placement), ("target", self.target_placement)):
            if placement is not None and (placement.resource_id, placement.revision) != (self.resource_id,
                                                                                        self.revision):
                raise ValueError(f"logical transfer plan {side} placement identity differs")
        generation = self.target_placement.weight_generation
        if self.source_placement is not None and self.source_placement.weight_generation != generation:
            raise ValueError("logical transfer plan source and target weight_generation differs")
        m = self.source_manifest
        if m is not None and (m.resource_id, m.revision, m.weight_generation) != (self.resource_id, self.revision,
                                                                                  generation):
            raise ValueError("logical transfer plan source manifest identity differs")
        total = 0
        for op in self.operations:
            _check_operation(op, self.source_placement is not None)
            if op.segment_count > limits.max_segments_per_region:
                raise ValueError("logical transfer plan exceeds max_segments_per_region")
            total += op.segment_count
            if total > limits.max_total_lowered_segments:
                raise ValueError("logical transfer plan exceeds max_total_lowered_segments")
        if any(not isinstance(e, PlacementExecutorPlan) for e in self.source_executors + self.target_executors):
            raise ValueError("logical transfer plan has invalid canonical executor metadata")
        self.validate_source_manifest_snapshot()
        object.__setattr__(self, "_operation_views", _OperationViews(
            source_indices=_index_operations(self.operations, self.source_executors, "source"),
            target_indices=_index_operations(self.operations, self.target_executors, "target"),
            pipeline_routes=_pipeline_routes(self.operations)))
        from .validation import _validate_logical_target_coverage
        _validate_logical_target_coverage(self)
        self.validate_source_placement_snapshot()

    @property
    def total_bytes(self):
        return sum(op.total_bytes for op in self.operations)

    @property
    def source_placement_id(self):
        return None if self.source_placement is None else self.source_placement.placement_id

    @property
    def target_placement_id(self):
        return self.target_placement.placement_id

    def validate_source_manifest_snapshot(self):
        """ValueError if a stored source no longer matches the snapshot the plan was made from."""
        if self.source_manifest is None:
            if self.source_manifest_identity is not None:
                raise ValueError("logical plan has unexpected source manifest identity")
            return
        snapshot = validate_weight_manifest_snapshot(self.source_manifest)
        if self.source_manifest_identity != snapshot.manifest_identity:
            raise ValueError("logical plan source manifest identity differs")
        if self.source_tensors != _tensor_catalog(snapshot.tensors):
            raise ValueError("logical plan source tensor catalog differs")
        stored = {f.fragment_id: f for f in snapshot.fragments}
        for op in self.operations:
            if not isinstance(op.source, StoredFragment) or stored.get(op.source.fragment_id) != op.source:
                raise ValueError("logical plan and source manifest fragment snapshots differ")

    def validate_source_placement_snapshot(self):
        """ValueError if the plan's source projections contradict its source placement."""
        if self.source_placement is not None:
            from .validation import _validate_logical_source_placement
            _validate_logical_source_placement(self)

    @property
    def pipeline_routes(self):
        return self._operation_views.pipeline_routes

    def operation_indices_for_executor(self, executor, side):
        if side not in ("source", "target"):
            raise ValueError(f"invalid executor side: {side}")
        executors = self.source_executors if side == "source" else self.target_executors
        if executor not in executors:
            raise ValueError(f"{side} executor is not part of this logical plan")
        views = self._operation_views
        table = views.source_indices if side == "source" else views.target_indices
        return table.get(_executor_key(executor), ())

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_operation_views"}

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)
        self.__post_init__()


__all__ = ["LogicalTransferPlan", "PlanningLimits", "PipelineRouteGroup", "PlacementExecutorPlan",
           "RuntimeTensorOwner", "LogicalTransferOperation", "LogicalTransferRegion", "TransferRegion"]
