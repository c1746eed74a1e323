"""Checks of runtime bindings against the exact logical placement they attest."""

from ..contracts import validate_resource_binding_identity
from . import _checks as _c
from .placement import WeightPlacementManifest
from .runtime import WeightRuntimeBindingManifest
from .types import canonical_strides_bytes
from .validation import _validate_runtime_binding_address_ranges


def validate_runtime_binding(placement, binding):
    """ValueError unless ``binding`` binds exactly its participant's fragments of ``placement``
    with matching sizes, shapes and contiguous strides, and no overlapping address ranges."""
    if not isinstance(placement, WeightPlacementManifest):
        raise ValueError("placement must be a WeightPlacementManifest")
    if not isinstance(binding, WeightRuntimeBindingManifest):
        raise ValueError("binding must be a WeightRuntimeBindingManifest")
    validate_resource_binding_identity(placement, binding)
    if placement.revision != binding.revision:
        raise ValueError("placement and runtime binding revision differ")
    part = next((p for p in placement.parts if p.participant_id == binding.participant_id), None)
    if part is None:
        raise ValueError(f"unknown runtime binding participant: {binding.participant_id}")
    bound = {f.placement_fragment_id: f for f in binding.fragments}
    logical = {f.placement_fragment_id: f for f in part.fragments}
    unknown = sorted(set(bound) - set(logical))
    if unknown:
        raise ValueError(f"unknown placement fragment in runtime binding: {unknown[0]}")
    missing = sorted(set(logical) - set(bound))
    if missing:
        raise ValueError(f"missing placement fragment in runtime binding: {missing[0]}")
    tensors = {t.tensor_id: t for t in placement.tensors}
    for f in part.fragments:
        fid = f.placement_fragment_id
        view = bound[fid]
        itemsize = tensors[f.tensor_id].itemsize
        if view.nbytes != f.nbytes:
            raise ValueError(f"runtime binding byte size does not match placement: {fid}")
        if view.local_shape != f.local_shape:
            raise ValueError(f"runtime binding local_shape does not match placement: {fid}")
        if view.itemsize != itemsize:
            raise ValueError(f"runtime binding itemsize does not match placement: {fid}")
        if view.strides_bytes != canonical_strides_bytes(f.local_shape, itemsize):
            raise ValueError(f"runtime binding stride does not describe a canonical contiguous view: {fid}")
    _validate_runtime_binding_address_ranges(instance_id=binding.instance_id, tensors=placement.tensors,
                                             placements=part.fragments, bindings=binding.fragments)


def _validate_runtime_binding_subset(placement, bindings):
    items = _c.items(bindings, "runtime bindings", WeightRuntimeBindingManifest)
    if len({b.participant_id for b in items}) != len(items):
        raise ValueError("duplicate runtime binding participant")
    for b in items:
        validate_runtime_binding(placement, b)
    parts = {p.participant_id: p for p in placement.parts}
    by_instance = {}
    for b in items:
        by_instance.setdefault(b.instance_id, []).append(b)
    for instance_id, group in by_instance.items():
        _validate_runtime_binding_address_ranges(
            instance_id=instance_id, tensors=placement.tensors,
            placements=tuple(f for b in group for f in parts[b.participant_id].fragments),
            bindings=tuple(f for b in group for f in b.fragments))
    return items


def validate_runtime_bindings(placement, bindings):
    """The exact binding set: one per participant that owns fragments, none for others."""
    items = _validate_runtime_binding_subset(placement, bindings)
    expected = {p.participant_id for p in placement.parts if p.fragments}
    actual = {b.participant_id for b in items}
    missing = sorted(expected - actual)
    if missing:
        raise ValueError(f"missing runtime binding participant: {missing[0]}")
    unknown = sorted(actual - expected)
    if unknown:
        raise ValueError(f"unknown runtime binding participant: {unknown[0]}")


__all__ = ["validate_runtime_binding", "validate_runtime_bindings"]
