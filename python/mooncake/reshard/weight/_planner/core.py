"""The planning pass: for each target fragment, the overlaps with the chosen source fragments.

Sources are grouped by geometry and found through a box index. A placement source uses, per
target DP rank, one complete source DP replica (round-robin over the complete ones) and the
tensor's chosen owner in it; a DP-owned tensor uses its single declared owner. Each target
fragment must be covered exactly by the selected overlaps.
"""

from ...geometry import boxes_exactly_cover
from ..storage_manifest import StoredFragment
from ..types import PlacementFragment
from . import geometry
from .contracts import LogicalTransferPlan, PlacementExecutorPlan, PlanningLimits
from .ownership import (_validate_local_target_inventory, _validate_target_coverage, complete_dp_owned_source_owners,
                        complete_parallel_source_replicas, has_dp_ownership, parallel_tensor_owner)
from .validation import _validate_tensor_compatibility, _validate_tensor_sets, _validate_tensor_subset


def _collect(placement, label):
    from ..placement import WeightPlacementManifest
    if not isinstance(placement, WeightPlacementManifest):
        raise ValueError(f"{label} placement manifests must be WeightPlacementManifest")
    return {t.tensor_id: t for t in placement.tensors}, list(placement.fragments)


def _executors(placement, operations, side, participant_ids=None):
    used = set()
    for op in operations:
        frag = getattr(op, side)
        if not isinstance(frag, PlacementFragment):
            raise ValueError(f"placement executor operation {side} is not a placement")
        used.add(frag.placement_fragment_id)
    out, ranks = [], set()
    for part in placement.parts:
        if participant_ids is not None and part.participant_id not in participant_ids:
            continue
        if not part.fragments:
            continue
        if part.rank in ranks:
            raise ValueError(f"duplicate {side} placement executor rank: {part.rank}")
        ranks.add(part.rank)
        ids = tuple(sorted(f.placement_fragment_id for f in part.fragments))
        if any(i in used for i in ids):
            out.append(PlacementExecutorPlan(placement_id=placement.placement_id, participant_id=part.participant_id,
                                             rank=part.rank, placement_fragment_ids=ids))
    out.sort(key=lambda e: (e.rank.dp, e.rank.pp, e.rank.ep, e.rank.tp))
    return tuple(out)


def _plan_operations(source_tensors, source_fragments, target_tensors, target_fragments, *, local_target, limits):
    if local_target:
        _validate_tensor_subset(source_tensors, target_tensors)
        _validate_local_target_inventory(target_tensors, target_fragments)
    else:
        _validate_tensor_sets(source_tensors, target_tensors)
        _validate_target_coverage(target_tensors, target_fragments)
    placed = [f for f in source_fragments if isinstance(f, PlacementFragment)]
    stored = [f for f in source_fragments if isinstance(f, StoredFragment)]
    if not source_fragments or len(placed) + len(stored) != len(source_fragments) or (placed and stored):
        raise ValueError("source fragments mix placement and stored locations")
    replicas = complete_parallel_source_replicas(source_tensors, placed) if placed else {}
    dp_owners = complete_dp_owned_source_owners(source_tensors, placed) if placed else {}
    replica_dps = sorted(replicas)
    source_dp_for = ({dp: replica_dps[dp % len(replica_dps)] for dp in {f.rank.dp for f in target_fragments}}
                     if replica_dps else {})
    groups = {}
    for f in source_fragments:
        groups.setdefault(f.tensor_id, {}).setdefault(geometry._geometry_key(f), []).append(f)
    indexes = {}
    for tensor_id, by_geometry in groups.items():
        for group in by_geometry.values():
            group.sort(key=geometry._source_sort_key)
        indexes[tensor_id] = geometry._CandidateBoxIndex.build(tuple(tuple(g) for g in by_geometry.values()))
    operations, segments = [], 0
    for target in sorted(target_fragments, key=lambda f: f.fragment_id):
        tensor = target_tensors[target.tensor_id]
        source_tensor = source_tensors.get(target.tensor_id)
        if source_tensor is None:
            raise ValueError(f"missing source tensor: {target.tensor_id}")
        _validate_tensor_compatibility(source_tensor, tensor)
        index = indexes.get(target.tensor_id)
        overlaps = []
        for group in (index.query(target) if index is not None else ()):
            if placed:
                if has_dp_ownership(source_tensor):
                    owner, dp = dp_owners[target.tensor_id], None
                else:
                    dp = source_dp_for[target.rank.dp]
                    owner = replicas[dp][target.tensor_id]
                eligible = [f for f in group if (dp is None or f.rank.dp == dp)
                            and parallel_tensor_owner(source_tensor, f) == owner]
                if not eligible:
                    continue
                chosen = eligible[0]
            else:
                chosen = group[0]
            box = geometry._overlap_box(chosen, target)
            if box is None:
                continue
            if len(operations) + len(overlaps) + 1 > limits.max_transfer_regions:
                raise ValueError(f"logical transfer plan exceeds max_transfer_regions: {limits.max_transfer_regions}")
            overlaps.append((box[0], box[1], chosen))
        overlaps.sort(key=lambda o: (o[0], o[1], o[2].fragment_id))
        if not boxes_exactly_cover(target.global_offset, target.local_shape, tuple((o, s) for o, s, _ in overlaps)):
            raise ValueError(f"target fragment is not fully covered: {target.fragment_id}")
        for offset, shape, source in overlaps:
            region = geometry._transfer_region(tensor, source, target, offset, shape)
            if region.segment_count > limits.max_segments_per_region:
                raise ValueError("logical transfer region exceeds max_segments_per_region: "
                                 f"{region.segment_count} > {limits.max_segments_per_region}")
            segments += region.segment_count
            if segments > limits.max_total_lowered_segments:
                raise ValueError("logical transfer plan exceeds max_total_lowered_segments: "
                                 f"{segments} > {limits.max_total_lowered_segments}")
            operations.append(region)
    operations.sort(key=lambda r: (r.target.fragment_id, r.target_base_offset, r.source.fragment_id,
                                   r.source_base_offset))
    return tuple(operations)


def _check_identity(source, target):
    for name in ("resource_id", "revision", "weight_generation"):
        if getattr(source, name) != getattr(target, name):
            raise ValueError(f"source and target {name} differ")


def plan(*, source_placement, source_manifest, target_placement, source_tensors, source_fragments,
         target_tensors, target_fragments, local_target=False, target_participant_ids=None, planning_limits=None):
    limits = planning_limits or PlanningLimits()
    operations = _plan_operations(source_tensors, source_fragments, target_tensors, target_fragments,
                                  local_target=local_target, limits=limits)
    origin = source_placement if source_placement is not None else source_manifest
    return LogicalTransferPlan(
        resource_id=origin.resource_id, revision=origin.revision, source_placement=source_placement,
        target_placement=target_placement,
        source_tensors=tuple(sorted(source_tensors.values(), key=lambda t: t.tensor_id)),
        target_tensors=tuple(sorted(target_tensors.values(), key=lambda t: t.tensor_id)),
        operations=operations, source_manifest=source_manifest, planning_limits=limits,
        source_executors=(_executors(source_placement, operations, "source")
                          if source_placement is not None else ()),
        target_executors=_executors(target_placement, operations, "target", target_participant_ids))
