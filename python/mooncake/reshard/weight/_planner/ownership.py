"""Which source fragments may feed a target: DP replicas, declared owners, and coverage checks."""

from ...geometry import boxes_exactly_cover
from ..types import OwnershipAxis


def _covers(tensor, fragments):
    boxes = tuple({(f.global_offset, f.local_shape) for f in fragments if f.tensor_id == tensor.tensor_id})
    return boxes_exactly_cover((0,) * len(tensor.global_shape), tensor.global_shape, boxes)


def parallel_tensor_owner(tensor, fragment):
    """The fragment's coordinates on the tensor's ownership axes, e.g. (("pp", 1), ("ep", 3))."""
    return tuple((a.kind, getattr(fragment.rank, a.kind)) for a in tensor.parallel_axes
                 if isinstance(a, OwnershipAxis))


def has_dp_ownership(tensor):
    """Whether DP names the tensor's owner rather than a replica."""
    return any(isinstance(a, OwnershipAxis) and a.kind == "dp" for a in tensor.parallel_axes)


def _by_owner(tensor, fragments):
    out = {}
    for f in fragments:
        out.setdefault(parallel_tensor_owner(tensor, f), []).append(f)
    return out


def complete_dp_owned_source_owners(source_tensors, source_fragments):
    """The single complete declared owner of each DP-owned source tensor (ValueError otherwise)."""
    owned = [t for t in source_tensors.values() if has_dp_ownership(t)]
    if not owned:
        return {}
    by_tensor = {}
    for f in source_fragments:
        by_tensor.setdefault(f.tensor_id, []).append(f)
    owners = {}
    for t in owned:
        groups = _by_owner(t, by_tensor.get(t.tensor_id, ()))
        complete = sorted(o for o, fs in groups.items() if _covers(t, fs))
        if not complete:
            raise ValueError(f"DP-owned source tensor has no complete declared owner: {t.tensor_id}")
        if len(complete) != 1 or len(groups) != 1:
            raise ValueError(f"DP-owned source tensor has ambiguous declared owners: {t.tensor_id}")
        owners[t.tensor_id] = complete[0]
    return owners


def complete_parallel_source_replicas(source_tensors, source_fragments):
    """For each DP rank whose every owner completely covers every replicated tensor, the owner
    chosen per tensor (the smallest). ValueError when no DP rank is complete."""
    by_dp = {}
    for f in source_fragments:
        by_dp.setdefault(f.rank.dp, {}).setdefault(f.tensor_id, []).append(f)
    tensors = [t for t in source_tensors.values() if not has_dp_ownership(t)]
    if not tensors:
        return {}
    replicas = {}
    for dp in sorted(by_dp):
        chosen = {}
        for t in tensors:
            groups = _by_owner(t, by_dp[dp].get(t.tensor_id, ()))
            if not groups or any(not _covers(t, fs) for fs in groups.values()):
                break
            chosen[t.tensor_id] = min(groups)
        else:
            replicas[dp] = chosen
    if not replicas:
        raise ValueError("source manifests have no complete DP replica; tensors are not fully covered")
    return replicas


def _validate_target_coverage(target_tensors, target_fragments):
    if not target_fragments:
        raise ValueError("target manifests have no fragments")
    by_dp = {}
    for f in target_fragments:
        by_dp.setdefault(f.rank.dp, {}).setdefault(f.tensor_id, []).append(f)
    for t in target_tensors.values():
        if has_dp_ownership(t):
            groups = _by_owner(t, [f for per in by_dp.values() for f in per.get(t.tensor_id, ())])
            if not groups or any(not _covers(t, fs) for fs in groups.values()):
                raise ValueError(f"target tensor is not fully covered by its DP owner: {t.tensor_id}")
            continue
        for dp in sorted(by_dp):
            groups = _by_owner(t, by_dp[dp].get(t.tensor_id, ()))
            if not groups or any(not _covers(t, fs) for fs in groups.values()):
                raise ValueError(f"target tensor is not fully covered: {t.tensor_id}: dp={dp}")


def _validate_local_target_inventory(target_tensors, target_fragments):
    if not target_fragments:
        raise ValueError("local target manifest has no fragments")
    if len({f.rank for f in target_fragments}) != 1:
        raise ValueError("local target manifest must describe exactly one executor")
    missing = sorted(set(target_tensors) - {f.tensor_id for f in target_fragments})
    if missing:
        raise ValueError(f"local target manifest is missing fragments: {', '.join(missing)}")


__all__ = ["complete_dp_owned_source_owners", "complete_parallel_source_replicas", "has_dp_ownership",
           "parallel_tensor_owner"]
