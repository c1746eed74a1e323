"""The parallel topology of one placement: axis sizes and the selected participants."""

from dataclasses import dataclass

from ..contracts import ParticipantId, TopologyId
from . import _checks as _c
from .types import ParallelRank


@dataclass(frozen=True)
class TopologyParticipant:
    """One runtime participant and its parallel coordinates."""

    participant_id: ParticipantId
    rank: ParallelRank

    def __post_init__(self):
        _c.text(self.participant_id, "participant_id")
        if not isinstance(self.rank, ParallelRank):
            raise ValueError("topology participant rank must be a ParallelRank")


def participants_wire(participants):
    return [{"participant_id": p.participant_id, "rank": _c.rank_dict(p.rank)} for p in participants]


@dataclass(frozen=True, init=False)
class ParallelTopology:
    """TP/PP/EP/DP sizes and the explicit participant-to-rank mapping.

    ``world_size`` counts the participants; it is not the product of the sizes (axes may share
    workers, and a placement may select one DP replica of a larger runtime).
    """

    tp_size: int
    pp_size: int
    ep_size: int
    dp_size: int
    participants: tuple
    topology_id: TopologyId

    def __init__(self, *, tp_size, pp_size, ep_size, dp_size, participants, topology_id=None):
        sizes = {"tp": tp_size, "pp": pp_size, "ep": ep_size, "dp": dp_size}
        for kind, size in sizes.items():
            _c.integer(size, f"{kind}_size", 1)
        members = _c.items(participants, "ParallelTopology participants", TopologyParticipant)
        if not members:
            raise ValueError("parallel topology participants must not be empty")
        members = tuple(sorted(members, key=lambda p: p.participant_id))
        if len({p.participant_id for p in members}) != len(members):
            raise ValueError("duplicate topology participant_id")
        if len({p.rank for p in members}) != len(members):
            raise ValueError("duplicate topology parallel rank")
        for p in members:
            for kind, size in sizes.items():
                if getattr(p.rank, kind) >= size:
                    raise ValueError(f"{kind} rank is out of range for participant {p.participant_id}")
        canonical = "sha256:" + _c.digest_of({
            "schema": "weight-parallel-topology", "tp_size": tp_size, "pp_size": pp_size, "ep_size": ep_size,
            "dp_size": dp_size, "participants": participants_wire(members)})
        if topology_id is not None and topology_id != canonical:
            raise ValueError("topology_id does not match canonical topology")
        for name, value in (("tp_size", tp_size), ("pp_size", pp_size), ("ep_size", ep_size),
                            ("dp_size", dp_size), ("participants", members), ("topology_id", canonical)):
            object.__setattr__(self, name, value)

    @property
    def world_size(self):
        return len(self.participants)

    def size(self, kind):
        return getattr(self, f"{kind}_size")

    def participant(self, participant_id):
        for p in self.participants:
            if p.participant_id == participant_id:
                return p
        raise ValueError(f"unknown topology participant: {participant_id}")

    def wire(self):
        return {"tp_size": self.tp_size, "pp_size": self.pp_size, "ep_size": self.ep_size, "dp_size": self.dp_size,
                "topology_id": self.topology_id, "participants": participants_wire(self.participants)}


__all__ = ["ParallelTopology", "TopologyParticipant"]
