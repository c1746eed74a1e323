"""A participant's runtime binding: physical views of its fragments, with generation and lease."""

from dataclasses import dataclass

from ..contracts import (LeaseId, ParticipantId, PlacementId, ResourceId, ResourceKind, RevisionId,
                         RuntimeBindingFragment, RuntimeInstanceId)
from . import _checks as _c


@dataclass(frozen=True)
class WeightRuntimeBindingManifest:
    """One live participant's physical fragments, attesting one placement's id and digest."""

    resource_id: ResourceId
    placement_id: PlacementId
    placement_digest: str
    instance_id: RuntimeInstanceId
    generation: int
    lease_id: LeaseId
    revision: RevisionId
    participant_id: ParticipantId
    fragments: tuple

    @property
    def resource_kind(self):
        return ResourceKind.MODEL_WEIGHT

    def __post_init__(self):
        for name in ("resource_id", "placement_id", "instance_id", "lease_id", "revision", "participant_id"):
            _c.text(getattr(self, name), name)
        _c.sha256_hex(self.placement_digest, "placement_digest")
        _c.u64(self.generation, "generation")
        fragments = _c.items(self.fragments, "WeightRuntimeBindingManifest fragments", RuntimeBindingFragment)
        fragments = tuple(sorted(fragments, key=lambda f: f.placement_fragment_id))
        object.__setattr__(self, "fragments", fragments)
        if len({f.placement_fragment_id for f in fragments}) != len(fragments):
            raise ValueError("duplicate placement fragment in runtime binding")
        if len({f.fragment_id for f in fragments}) != len(fragments):
            raise ValueError("duplicate runtime fragment_id in runtime binding")


__all__ = ["WeightRuntimeBindingManifest"]
