"""One participant's address-free contribution to a global placement."""

from dataclasses import dataclass

from ..contracts import ParticipantId, PlacementSetId, ResourceId, RevisionId, TopologyId
from . import _checks as _c
from .types import ParallelRank, PlacementFragment, TensorDescriptor
from .validation import _validate_fragments


@dataclass(frozen=True)
class WeightPlacementPart:
    """The tensors and logical fragments of one participant; it declares exactly the tensors its
    fragments reference. Alias groups are checked only once all parts are assembled."""

    resource_id: ResourceId
    revision: RevisionId
    weight_generation: int
    placement_set_id: PlacementSetId
    topology_id: TopologyId
    participant_id: ParticipantId
    rank: ParallelRank
    tensors: tuple
    fragments: tuple

    def __post_init__(self):
        for name in ("resource_id", "revision", "placement_set_id", "topology_id", "participant_id"):
            _c.text(getattr(self, name), name)
        _c.u64(self.weight_generation, "weight_generation")
        if not isinstance(self.rank, ParallelRank):
            raise ValueError("placement part rank must be a ParallelRank")
        tensors = _c.items(self.tensors, "WeightPlacementPart tensors", TensorDescriptor)
        fragments = _c.items(self.fragments, "WeightPlacementPart fragments", PlacementFragment)
        if any(f.rank != self.rank for f in fragments):
            raise ValueError("placement part fragment rank differs from part rank")
        unreferenced = sorted({t.tensor_id for t in tensors} - {f.tensor_id for f in fragments})
        if unreferenced:
            raise ValueError(f"placement part contains an unreferenced tensor: {unreferenced[0]}")
        object.__setattr__(self, "tensors", tuple(sorted(tensors, key=lambda t: t.tensor_id)))
        object.__setattr__(self, "fragments", tuple(sorted(fragments, key=lambda f: f.placement_fragment_id)))
        _validate_fragments(self.tensors, self.fragments)


__all__ = ["WeightPlacementPart"]
