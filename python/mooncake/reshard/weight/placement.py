"""A complete global placement: every participant's part, validated together, and its identity."""

import hashlib
from dataclasses import dataclass, field
from typing import Optional

from ..contracts import PlacementId, PlacementSetId, ResourceId, ResourceKind, RevisionId
from . import _checks as _c
from .part import WeightPlacementPart
from .topology import ParallelTopology
from .types import PlacementFragment, TensorDescriptor
from .validation import _validate_complete_weight_placement, _validate_fragments


def _check_parts(parts, topology, resource_id, revision, weight_generation, placement_set_id):
    ids = [p.participant_id for p in parts]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate placement participant")
    declared = {p.participant_id: p for p in topology.participants}
    missing = sorted(set(declared) - set(ids))
    if missing:
        raise ValueError(f"missing topology participant: {missing[0]}")
    unknown = sorted(set(ids) - set(declared))
    if unknown:
        raise ValueError(f"unknown topology participant: {unknown[0]}")
    for part in parts:
        for name, want in (("resource_id", resource_id), ("revision", revision),
                           ("weight_generation", weight_generation), ("placement_set_id", placement_set_id),
                           ("topology_id", topology.topology_id)):
            if getattr(part, name) != want:
                raise ValueError(f"placement part {name} differs")
        if part.rank != declared[part.participant_id].rank:
            raise ValueError("placement part rank differs from topology")


@dataclass(frozen=True, init=False)
class WeightPlacementManifest:
    """One complete, address-free placement of a weight generation.

    ``placement_id`` is the SHA-256 of the canonical logical content (resource, revision,
    generation, placement set, topology, tensors, per-participant fragments); ``digest`` the
    SHA-256 of the canonical JSON form (``weight_placement_to_json``).
    """

    resource_id: ResourceId
    placement_id: PlacementId
    revision: RevisionId
    weight_generation: int
    placement_set_id: PlacementSetId
    topology: ParallelTopology
    parts: tuple
    tensors: tuple
    fragments: tuple
    _digest_cache: Optional[str] = field(init=False, repr=False, compare=False)

    def __init__(self, *, resource_id, revision, weight_generation, placement_set_id, topology, parts,
                 placement_id=None):
        _c.text(resource_id, "resource_id")
        _c.text(revision, "revision")
        _c.u64(weight_generation, "weight_generation")
        _c.text(placement_set_id, "placement_set_id")
        if not isinstance(topology, ParallelTopology):
            raise ValueError("topology must be a ParallelTopology")
        if placement_id is not None:
            _c.text(placement_id, "placement_id")
        parts = tuple(sorted(_c.items(parts, "WeightPlacementManifest parts", WeightPlacementPart),
                             key=lambda p: p.participant_id))
        _check_parts(parts, topology, resource_id, revision, weight_generation, placement_set_id)
        catalog = {}
        fragments = []
        for part in parts:
            for t in part.tensors:
                if catalog.setdefault(t.tensor_id, t) != t:
                    raise ValueError(f"placement part tensor descriptor mismatch: {t.tensor_id}")
            fragments.extend(part.fragments)
        tensors = tuple(sorted(catalog.values(), key=lambda t: t.tensor_id))
        fragments = tuple(sorted(fragments, key=lambda f: f.placement_fragment_id))
        _validate_fragments(tensors, fragments, require_complete_alias_groups=True)
        _validate_complete_weight_placement(tensors, fragments, topology=topology)
        content = {
            "schema": "complete-weight-placement", "resource_id": resource_id, "revision": revision,
            "weight_generation": weight_generation, "placement_set_id": placement_set_id,
            "topology": topology.wire(), "tensors": [t.identity() for t in tensors],
            "parts": [{"participant_id": p.participant_id, "rank": _c.rank_dict(p.rank),
                       "fragments": [f.identity() for f in p.fragments]} for p in parts]}
        canonical = "sha256:" + _c.digest_of(content)
        if placement_id is not None and placement_id != canonical:
            raise ValueError("placement_id does not match canonical logical content")
        for name, value in (("resource_id", resource_id), ("placement_id", canonical), ("revision", revision),
                            ("weight_generation", weight_generation), ("placement_set_id", placement_set_id),
                            ("topology", topology), ("parts", parts), ("tensors", tensors),
                            ("fragments", fragments), ("_digest_cache", None)):
            object.__setattr__(self, name, value)

    @property
    def resource_kind(self):
        return ResourceKind.MODEL_WEIGHT

    @property
    def digest(self):
        if self._digest_cache is None:
            from .serde import weight_placement_to_json
            object.__setattr__(self, "_digest_cache",
                               hashlib.sha256(weight_placement_to_json(self).encode()).hexdigest())
        return self._digest_cache

    @classmethod
    def from_fragments(cls, *, resource_id, revision, weight_generation, placement_set_id, topology, tensors,
                       fragments, placement_id=None):
        """Build the parts from a flat inventory, grouping fragments by their rank's participant."""
        tensors = _c.items(tensors, "placement tensors", TensorDescriptor)
        fragments = _c.items(fragments, "placement fragments", PlacementFragment)
        catalog = {t.tensor_id: t for t in tensors}
        if len(catalog) != len(tensors):
            raise ValueError("duplicate tensor_id in placement tensors")
        used = {f.tensor_id for f in fragments}
        unknown = sorted(used - set(catalog))
        if unknown:
            raise ValueError(f"unknown tensor_id: {unknown[0]}")
        unused = sorted(set(catalog) - used)
        if unused:
            raise ValueError(f"global placement contains an unreferenced tensor: {unused[0]}")
        by_rank = {p.rank: p.participant_id for p in topology.participants}
        grouped = {p.participant_id: [] for p in topology.participants}
        for f in fragments:
            if f.rank not in by_rank:
                raise ValueError(f"placement fragment rank has no topology participant: {f.fragment_id}")
            grouped[by_rank[f.rank]].append(f)
        parts = tuple(WeightPlacementPart(
            resource_id=resource_id, revision=revision, weight_generation=weight_generation,
            placement_set_id=placement_set_id, topology_id=topology.topology_id, participant_id=p.participant_id,
            rank=p.rank, tensors=tuple(catalog[i] for i in sorted({f.tensor_id for f in grouped[p.participant_id]})),
            fragments=tuple(grouped[p.participant_id])) for p in topology.participants)
        return cls(resource_id=resource_id, revision=revision, weight_generation=weight_generation,
                   placement_set_id=placement_set_id, topology=topology, parts=parts, placement_id=placement_id)


__all__ = ["WeightPlacementManifest"]
