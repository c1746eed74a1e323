"""Checks across fragments: geometry, aliases, axis coverage, runtime address ranges."""

from itertools import product

from ..geometry import boxes_exactly_cover, boxes_overlap
from .types import OwnershipAxis, ReplicatedAxis, SplitAxis, validate_fragment_geometry

KINDS = ("dp", "pp", "ep", "tp")


def _kinds(tensor, axis_type):
    return tuple(a.kind for a in tensor.parallel_axes if isinstance(a, axis_type))


def _coords(rank, kinds):
    return tuple((k, getattr(rank, k)) for k in kinds)


def _matches(rank, coords):
    return all(getattr(rank, k) == v for k, v in coords)


def _validate_fragments(tensors, fragments, *, require_complete_alias_groups=False):
    """Unique ids, known tensors, boxes in bounds, no overlap per (tensor, rank)."""
    by_id = {}
    for t in tensors:
        if t.tensor_id in by_id:
            raise ValueError(f"duplicate tensor_id: {t.tensor_id}")
        by_id[t.tensor_id] = t
    seen_ids, seen_boxes = set(), set()
    for f in fragments:
        if f.fragment_id in seen_ids:
            raise ValueError(f"duplicate fragment_id: {f.fragment_id}")
        seen_ids.add(f.fragment_id)
        box = (f.tensor_id, f.rank, f.global_offset, f.local_shape)
        if box in seen_boxes:
            raise ValueError(f"duplicate logical fragment for tensor and parallel rank: {f.fragment_id}")
        seen_boxes.add(box)
        tensor = by_id.get(f.tensor_id)
        if tensor is None:
            raise ValueError(f"unknown tensor_id: {f.tensor_id}")
        validate_fragment_geometry(tensor, fragment_id=f.fragment_id, global_offset=f.global_offset,
                                   local_shape=f.local_shape, nbytes=f.nbytes)
    if require_complete_alias_groups:
        _validate_alias_groups(by_id, fragments)
    groups = {}
    for f in fragments:
        groups.setdefault((f.tensor_id, f.rank), []).append((f.global_offset, f.local_shape))
    for boxes in groups.values():
        if len(boxes) > 1 and boxes_overlap(tuple(boxes)):
            raise ValueError("logical fragment boxes overlap for tensor and parallel rank")


def _validate_alias_groups(tensors_by_id, fragments):
    """Every member of an alias group is a known tensor whose every fragment declares the same group."""
    groups_of = {}
    for f in fragments:
        groups_of.setdefault(f.tensor_id, set()).add(f.aliases)
    for group in sorted({f.aliases for f in fragments if f.aliases}):
        unknown = sorted(set(group) - set(tensors_by_id))
        if unknown:
            raise ValueError(f"alias group references unknown tensor: {unknown[0]}")
        for tensor_id in group:
            if groups_of.get(tensor_id, set()) != {group}:
                raise ValueError(f"alias group is not declared consistently for tensor: {tensor_id}")


def _covers(tensor, fragments):
    return boxes_exactly_cover((0,) * len(tensor.global_shape), tensor.global_shape,
                               tuple((f.global_offset, f.local_shape) for f in fragments))


def _validate_complete_weight_placement(tensors, fragments, *, topology):
    if not tensors:
        raise ValueError("global weight placement must contain tensors")
    if not fragments:
        raise ValueError("global weight placement must contain fragments")
    by_tensor = {}
    for f in fragments:
        by_tensor.setdefault(f.tensor_id, []).append(f)
    for tensor in tensors:
        mine = by_tensor.get(tensor.tensor_id)
        if not mine:
            raise ValueError(f"global placement tensor is not fully covered: {tensor.tensor_id}")
        _validate_axis_covers(tensor, mine, topology)


def _validate_axis_covers(tensor, fragments, topology):
    _validate_undeclared_axes(tensor, fragments, topology)
    owner_kinds = _kinds(tensor, OwnershipAxis)
    replica_kinds = _kinds(tensor, ReplicatedAxis)
    for owner in sorted({_coords(f.rank, owner_kinds) for f in fragments}):
        owned = [f for f in fragments if _coords(f.rank, owner_kinds) == owner]
        expected = {_coords(p.rank, replica_kinds) for p in topology.participants if _matches(p.rank, owner)}
        if {_coords(f.rank, replica_kinds) for f in owned} != expected:
            raise ValueError("global placement tensor is not fully covered: missing or unexpected "
                             f"replicated-axis participant for {tensor.tensor_id}")
        for replica in sorted(expected):
            cover = [f for f in owned if _coords(f.rank, replica_kinds) == replica]
            if not _covers(tensor, cover):
                raise ValueError(f"global placement tensor is not fully covered: {tensor.tensor_id}")
            _validate_split_participation(tensor, cover, topology, owner + replica)
            _validate_split_geometry(tensor, cover)


def _validate_undeclared_axes(tensor, fragments, topology):
    """An active axis the tensor does not declare may only vary in lockstep with a declared one."""
    declared = tuple(a.kind for a in tensor.parallel_axes)
    varying = tuple(k for k in declared if len({getattr(f.rank, k) for f in fragments}) > 1)
    for kind in KINDS:
        if kind in declared or topology.size(kind) == 1:
            continue
        values = {getattr(f.rank, kind) for f in fragments}
        if kind in ("dp", "pp") or len(values) <= 1:
            raise ValueError("global placement tensor requires explicit parallel semantics "
                             f"for active undeclared {kind} axis: {tensor.tensor_id}")
        if not varying:
            raise ValueError(f"global placement tensor varies across undeclared {kind} axis: {tensor.tensor_id}")
        seen = {}
        for f in fragments:
            if seen.setdefault(_coords(f.rank, varying), getattr(f.rank, kind)) != getattr(f.rank, kind):
                raise ValueError("global placement tensor varies independently across undeclared "
                                 f"{kind} axis: {tensor.tensor_id}")


def _merged(intervals):
    out = []
    for begin, end in sorted(set(intervals)):
        if out and begin <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([begin, end])
    return out


def _validate_split_geometry(tensor, fragments):
    axes = tuple(a for a in tensor.parallel_axes if isinstance(a, SplitAxis))
    if not axes:
        return
    observed = {tuple(getattr(f.rank, a.kind) for a in axes) for f in fragments}
    values = [sorted({getattr(f.rank, a.kind) for f in fragments}) for a in axes]
    if observed != set(product(*values)):
        raise ValueError("non-Cartesian split-axis participant mapping cannot prove "
                         f"rank-to-dimension ownership: {tensor.tensor_id}")
    for axis in axes:
        per_rank = {}
        for f in fragments:
            begin = f.global_offset[axis.dim]
            per_rank.setdefault(getattr(f.rank, axis.kind), []).append((begin, begin + f.local_shape[axis.dim]))
        cursor = 0
        for begin, end in sorted(tuple(iv) for ivs in per_rank.values() for iv in _merged(ivs)):
            if begin != cursor:
                cursor = -1
                break
            cursor = end
        if cursor != tensor.global_shape[axis.dim]:
            raise ValueError("split-axis rank geometry conflicts with declared dimension: "
                             f"{tensor.tensor_id}: {axis.kind} -> dim {axis.dim}")


def _validate_split_participation(tensor, fragments, topology, fixed):
    kinds = _kinds(tensor, SplitAxis)
    if not kinds:
        return
    expected = {_coords(p.rank, kinds) for p in topology.participants if _matches(p.rank, fixed)}
    actual = {_coords(f.rank, kinds) for f in fragments}
    complete = all({dict(c)[k] for c in expected} == set(range(topology.size(k))) for k in kinds)
    if not complete or actual != expected:
        raise ValueError("global placement tensor is not fully covered: missing or unexpected "
                         f"split-axis participant for {tensor.tensor_id}")


def _alias_key(tensor):
    return (tensor.global_shape, tensor.dtype, tensor.itemsize, tensor.shard_dims, tensor.parallel_axes,
            tensor.layer_id, tensor.expert_id, tensor.layout_fingerprint)


def _declared_alias(lp, lb, rp, rb, tensors):
    return (lb.address == rb.address and lb.nbytes == rb.nbytes and len(lp.aliases) >= 2
            and lp.aliases == rp.aliases and lp.tensor_id in lp.aliases and rp.tensor_id in lp.aliases
            and lp.global_offset == rp.global_offset and lp.local_shape == rp.local_shape
            and _alias_key(tensors[lp.tensor_id]) == _alias_key(tensors[rp.tensor_id]))


def _validate_runtime_binding_address_ranges(*, instance_id, tensors, placements, bindings):
    """Within one (instance, worker, device) no two views overlap unless they are one declared alias,
    and no two allocations overlap unless they are the same allocation."""
    tensor_by_id = {t.tensor_id: t for t in tensors}
    placement_by_id = {f.placement_fragment_id: f for f in placements}
    spaces = {}
    for b in bindings:
        spaces.setdefault((instance_id, b.worker_id, b.device), []).append((placement_by_id[b.placement_fragment_id], b))
    for space, pairs in spaces.items():
        active = []
        for p, b in sorted(pairs, key=lambda pb: pb[1].address):
            active = [(q, c) for q, c in active if c.address + c.nbytes > b.address]
            for q, c in active:
                if not _declared_alias(q, c, p, b, tensor_by_id):
                    raise ValueError(f"runtime binding address ranges overlap: {c.fragment_id} and "
                                     f"{b.fragment_id} in {space}")
            active.append((p, b))
        active = []
        for b in sorted((b for _, b in pairs), key=lambda b: b.storage_address):
            active = [c for c in active if c.storage_address + c.storage_nbytes > b.storage_address]
            for c in active:
                if (c.storage_address, c.storage_nbytes) != (b.storage_address, b.storage_nbytes):
                    raise ValueError(f"runtime binding storage allocation ranges overlap: {c.fragment_id} and "
                                     f"{b.fragment_id} in {space}")
            active.append(b)
