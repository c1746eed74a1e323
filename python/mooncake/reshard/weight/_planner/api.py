"""The public planning entry points."""

from .core import _check_identity, _collect, plan


def plan_placement_transfer(source_placement, target_placement, *, planning_limits=None):
    """Plan a reshard between two complete address-free placements."""
    source_tensors, source_fragments = _collect(source_placement, "source")
    target_tensors, target_fragments = _collect(target_placement, "target")
    _check_identity(source_placement, target_placement)
    return plan(source_placement=source_placement, source_manifest=None, target_placement=target_placement,
                source_tensors=source_tensors, source_fragments=source_fragments, target_tensors=target_tensors,
                target_fragments=target_fragments, planning_limits=planning_limits)


def plan_placement_transfer_to_local_target(source_placement, target_placement, target_participant_id=None, *,
                                            planning_limits=None):
    """Plan the writes of one target participant (required unless the target has a single one)."""
    source_tensors, source_fragments = _collect(source_placement, "source")
    if target_participant_id is None:
        if target_placement.topology.world_size != 1:
            raise ValueError("target_participant_id is required for a multi-participant target")
        target_participant_id = target_placement.parts[0].participant_id
    part = next((p for p in target_placement.parts if p.participant_id == target_participant_id), None)
    if part is None:
        raise ValueError(f"unknown target participant: {target_participant_id}")
    _check_identity(source_placement, target_placement)
    result = plan(source_placement=source_placement, source_manifest=None, target_placement=target_placement,
                  source_tensors=source_tensors, source_fragments=source_fragments,
                  target_tensors={t.tensor_id: t for t in part.tensors}, target_fragments=list(part.fragments),
                  local_target=True, target_participant_ids=frozenset({target_participant_id}),
                  planning_limits=planning_limits)
    if len(result.target_executors) != 1:
        raise ValueError("local target placement must describe exactly one executor")
    return result


def plan_stored_transfer_to_target_placement(source_manifest, target_placement, *, planning_limits=None):
    """Plan loading a committed Store snapshot into a target placement."""
    target_tensors, target_fragments = _collect(target_placement, "target")
    _check_identity(source_manifest, target_placement)
    return plan(source_placement=None, source_manifest=source_manifest, target_placement=target_placement,
                source_tensors={t.tensor_id: t for t in source_manifest.tensors},
                source_fragments=source_manifest.fragments, target_tensors=target_tensors,
                target_fragments=target_fragments, planning_limits=planning_limits)


__all__ = ["plan_placement_transfer", "plan_placement_transfer_to_local_target",
           "plan_stored_transfer_to_target_placement"]
