"""Checks of a plan against its placements, and of source/target tensor compatibility."""

from ...geometry import regions_exactly_cover
from ..types import PlacementFragment


def _check_fragments_in(plan, placement, side):
    """Each operation's fragment on ``side`` is one of the placement's; returns its participants."""
    parts = {p.participant_id: p for p in placement.parts}
    owner = {f.placement_fragment_id: p.participant_id for p in placement.parts for f in p.fragments}
    participants = set()
    by_fragment = {}
    for op in plan.operations:
        frag = getattr(op, side)
        if not isinstance(frag, PlacementFragment):
            raise ValueError(f"logical transfer operation {side} must be a placement")
        pid = owner.get(frag.placement_fragment_id)
        if pid is None or frag not in parts[pid].fragments:
            raise ValueError(f"logical plan and {side} placement fragment snapshots differ")
        participants.add(pid)
        by_fragment.setdefault(frag.placement_fragment_id, []).append(op)
    return parts, participants, by_fragment


def _check_executors(plan, placement, executors, parts, side, label):
    seen = set()
    for e in executors:
        if e.placement_id != placement.placement_id:
            raise ValueError(f"logical {side} executor placement differs from {label}")
        if e.participant_id in seen:
            raise ValueError(f"logical plan has duplicate {side} executor participant")
        seen.add(e.participant_id)
        part = parts.get(e.participant_id)
        if part is None or e.rank != part.rank:
            raise ValueError(f"logical {side} executor differs from {side} placement")
        if e.placement_fragment_ids != tuple(sorted(f.placement_fragment_id for f in part.fragments)):
            raise ValueError(f"logical {side} executor fragments differ from {side} placement")
        if not plan.operation_indices_for_executor(e, side):
            raise ValueError(f"logical {side} executor operations differ from {side} placement")
    return seen


def _validate_logical_target_coverage(plan):
    """Every fragment of every target executor is exactly covered by the plan's regions."""
    placement = plan.target_placement
    parts, participants, by_fragment = _check_fragments_in(plan, placement, "target")
    if not plan.target_executors:
        raise ValueError("logical plan has no target executor metadata")
    seen = _check_executors(plan, placement, plan.target_executors, parts, "target", "target")
    selected, catalog = {}, {}
    for e in plan.target_executors:
        part = parts[e.participant_id]
        selected.update({f.placement_fragment_id: f for f in part.fragments})
        for t in part.tensors:
            if catalog.setdefault(t.tensor_id, t) != t:
                raise ValueError("logical target tensor catalog differs from placement")
    if seen != participants:
        raise ValueError("logical target executors differ from planned operations")
    if plan.target_tensors != tuple(sorted(catalog.values(), key=lambda t: t.tensor_id)):
        raise ValueError("logical target tensor catalog differs from placement")
    for fid, frag in selected.items():
        if not regions_exactly_cover(frag, by_fragment.get(fid, ())):
            raise ValueError(f"logical target fragment is not fully covered: {fid}")


def _validate_logical_source_placement(plan):
    placement = plan.source_placement
    if placement is None:
        return
    if plan.source_tensors != placement.tensors:
        raise ValueError("logical plan source tensor catalog differs from placement")
    if not plan.source_executors:
        raise ValueError("logical plan has no source executor metadata")
    parts, participants, _ = _check_fragments_in(plan, placement, "source")
    seen = _check_executors(plan, placement, plan.source_executors, parts, "source", "source")
    if seen != participants:
        raise ValueError("logical source executors differ from planned operations")


def _validate_tensor_compatibility(source, target):
    if source.layout_fingerprint != target.layout_fingerprint:
        raise ValueError(f"layout mismatch for tensor {source.tensor_id}")
    if (source.global_shape, source.dtype, source.itemsize, source.layer_id, source.expert_id) != \
            (target.global_shape, target.dtype, target.itemsize, target.layer_id, target.expert_id):
        raise ValueError(f"tensor descriptor mismatch: {source.tensor_id}")


def _validate_tensor_sets(source_tensors, target_tensors):
    missing = sorted(set(source_tensors) - set(target_tensors))
    if missing:
        raise ValueError(f"target manifests are missing tensors: {', '.join(missing)}")
    _validate_tensor_subset(source_tensors, target_tensors)


def _validate_tensor_subset(source_tensors, target_tensors):
    unexpected = sorted(set(target_tensors) - set(source_tensors))
    if unexpected:
        raise ValueError(f"target manifests contain unknown tensors: {', '.join(unexpected)}")
