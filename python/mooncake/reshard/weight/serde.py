"""The canonical JSON wire form of a placement manifest, and its strict parser.

The parser accepts exactly the canonical fields (an absent ``pipeline_stage_id`` in a fragment is
the form of a fragment without a stage), rejects duplicate keys, non-finite numbers, bools for
integers and unknown fields, and rebuilds the typed manifest, whose own checks then apply.
"""

import json
from collections.abc import Mapping, Sequence

from ..contracts import ResourceKind
from . import _checks as _c
from .part import WeightPlacementPart
from .placement import WeightPlacementManifest
from .topology import ParallelTopology, TopologyParticipant
from .types import OwnershipAxis, ParallelRank, PlacementFragment, ReplicatedAxis, SplitAxis, TensorDescriptor

_MANIFEST_FIELDS = {"resource_kind", "resource_id", "revision", "weight_generation", "placement_set_id",
                    "placement_id", "topology", "tensors", "parts"}
_TOPOLOGY_FIELDS = {"tp_size", "pp_size", "ep_size", "dp_size", "topology_id", "participants"}
_TENSOR_FIELDS = {"tensor_id", "global_shape", "dtype", "itemsize", "shard_dims", "layout_fingerprint",
                  "parallel_axes", "layer_id", "expert_id"}
_FRAGMENT_FIELDS = {"placement_fragment_id", "tensor_id", "global_offset", "local_shape", "nbytes", "rank",
                    "aliases"}


def weight_placement_to_json(placement):
    """The canonical JSON (sorted keys, no whitespace) of one placement."""
    if not isinstance(placement, WeightPlacementManifest):
        raise ValueError("placement must be a WeightPlacementManifest")
    return _c.canonical_json({
        "resource_kind": placement.resource_kind.value, "resource_id": placement.resource_id,
        "revision": placement.revision, "weight_generation": placement.weight_generation,
        "placement_set_id": placement.placement_set_id, "placement_id": placement.placement_id,
        "topology": placement.topology.wire(), "tensors": [t.identity() for t in placement.tensors],
        "parts": [{"participant_id": p.participant_id, "rank": _c.rank_dict(p.rank),
                   "fragments": [f.identity() for f in p.fragments]} for p in placement.parts]})


def _object(value, label):
    if not isinstance(value, Mapping) or any(type(k) is not str for k in value):
        raise ValueError(f"{label} must be a JSON object")
    return value


def _exact(value, fields, label):
    value = _object(value, label)
    if set(value) != set(fields):
        raise ValueError(f"{label} schema fields do not match contract")
    return value


def _seq(value, label):
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise ValueError(f"{label} must be a sequence")
    return value


def _int(value, label, minimum):
    if type(value) is not int or value < minimum:
        raise ValueError(f"{label} must be an integer at least {minimum}")
    return value


def _opt_int(value, label, minimum):
    return None if value is None else _int(value, label, minimum)


def _ints(value, label, minimum):
    return tuple(_int(v, label, minimum) for v in _seq(value, label))


def _kind(value, split=False):
    kind = _c.text(value, "parallel axis kind")
    if kind not in ("dp", "pp", "ep", "tp"):
        raise ValueError(f"unsupported parallel axis kind: {kind}")
    if split and kind not in ("ep", "tp"):
        raise ValueError(f"{kind} cannot use split semantics")
    return kind


def _rank(value, label):
    r = _exact(value, {"dp", "tp", "pp", "ep"}, label)
    return ParallelRank(**{k: _int(r[k], f"rank {k}", 0) for k in ("dp", "tp", "pp", "ep")})


def _axis(value, index):
    label = f"placement tensor parallel axis {index}"
    axis = _object(value, label)
    semantics = _c.text(axis.get("semantics"), "axis semantics")
    if semantics == "split":
        axis = _exact(axis, {"semantics", "kind", "dim"}, label)
        return SplitAxis(kind=_kind(axis["kind"], split=True), dim=_int(axis["dim"], "split axis dim", 0))
    if semantics in ("replicated", "ownership"):
        axis = _exact(axis, {"semantics", "kind"}, label)
        return (ReplicatedAxis if semantics == "replicated" else OwnershipAxis)(kind=_kind(axis["kind"]))
    raise ValueError(f"unsupported parallel axis semantics: {semantics}")


def _tensor(value, index):
    t = _exact(value, _TENSOR_FIELDS, f"placement tensor {index}")
    return TensorDescriptor(
        tensor_id=_c.text(t["tensor_id"], "tensor_id"),
        global_shape=_ints(t["global_shape"], "global_shape", 1),
        dtype=_c.text(t["dtype"], "dtype"), itemsize=_int(t["itemsize"], "itemsize", 1),
        shard_dims=_ints(t["shard_dims"], "shard_dims", 0),
        layout_fingerprint=_c.text(t["layout_fingerprint"], "layout_fingerprint"),
        parallel_axes=tuple(_axis(a, i) for i, a in enumerate(_seq(t["parallel_axes"],
                                                                  "placement tensor parallel_axes"))),
        layer_id=_opt_int(t["layer_id"], "layer_id", 0), expert_id=_opt_int(t["expert_id"], "expert_id", 0))


def _fragment(value, index):
    f = _object(value, f"placement fragment {index}")
    if set(f) not in (_FRAGMENT_FIELDS, _FRAGMENT_FIELDS | {"pipeline_stage_id"}):
        raise ValueError(f"placement fragment {index} has an invalid schema")
    return PlacementFragment(
        placement_fragment_id=_c.text(f["placement_fragment_id"], "placement_fragment_id"),
        tensor_id=_c.text(f["tensor_id"], "tensor_id"),
        global_offset=_ints(f["global_offset"], "global_offset", 0),
        local_shape=_ints(f["local_shape"], "local_shape", 1),
        nbytes=_int(f["nbytes"], "nbytes", 1), rank=_rank(f["rank"], f"placement rank {index}"),
        pipeline_stage_id=_opt_int(f.get("pipeline_stage_id"), "pipeline_stage_id", 0),
        aliases=tuple(_c.text(a, "alias") for a in _seq(f["aliases"], "aliases")))


def _topology(value):
    t = _exact(value, _TOPOLOGY_FIELDS, "parallel topology")
    members = []
    for i, item in enumerate(_seq(t["participants"], "parallel topology participants")):
        p = _exact(item, {"participant_id", "rank"}, f"parallel topology participant {i}")
        members.append(TopologyParticipant(participant_id=_c.text(p["participant_id"], "participant_id"),
                                           rank=_rank(p["rank"], f"parallel topology rank {i}")))
    return ParallelTopology(**{k: _int(t[k], k, 1) for k in ("tp_size", "pp_size", "ep_size", "dp_size")},
                            participants=tuple(members), topology_id=_c.text(t["topology_id"], "topology_id"))


def _load(value, label):
    def no_constant(name):
        raise ValueError(f"non-finite JSON number is unsupported: {name}")

    def no_duplicates(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise ValueError(f"duplicate JSON field: {k}")
            out[k] = v
        return out

    try:
        raw = json.loads(value, parse_constant=no_constant, object_pairs_hook=no_duplicates)
    except (TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"{label} is not valid JSON") from error
    return _object(raw, label)


def weight_placement_from_json(value):
    """Parse the canonical wire form back into a validated ``WeightPlacementManifest``."""
    m = _exact(_load(value, "placement manifest"), _MANIFEST_FIELDS, "placement manifest")
    if _c.text(m["resource_kind"], "resource_kind") != ResourceKind.MODEL_WEIGHT.value:
        raise ValueError("placement manifest resource_kind must be model_weight")
    common = {"resource_id": _c.text(m["resource_id"], "resource_id"),
              "revision": _c.text(m["revision"], "revision"),
              "weight_generation": _int(m["weight_generation"], "weight_generation", 0),
              "placement_set_id": _c.text(m["placement_set_id"], "placement_set_id")}
    placement_id = _c.text(m["placement_id"], "placement_id")
    topology = _topology(m["topology"])
    tensors = tuple(_tensor(t, i) for i, t in enumerate(_seq(m["tensors"], "placement tensors")))
    catalog = {t.tensor_id: t for t in tensors}
    if len(catalog) != len(tensors):
        raise ValueError("duplicate tensor_id in placement JSON")
    parts, used = [], set()
    for i, item in enumerate(_seq(m["parts"], "placement parts")):
        p = _exact(item, {"participant_id", "rank", "fragments"}, f"placement part {i}")
        participant_id = _c.text(p["participant_id"], "participant_id")
        rank = _rank(p["rank"], f"placement part rank {i}")
        fragments = tuple(_fragment(f, j) for j, f in enumerate(_seq(p["fragments"], "placement part fragments")))
        ids = {f.tensor_id for f in fragments}
        unknown = sorted(ids - set(catalog))
        if unknown:
            raise ValueError(f"unknown tensor_id in placement part: {unknown[0]}")
        used |= ids
        parts.append(WeightPlacementPart(topology_id=topology.topology_id, participant_id=participant_id, rank=rank,
                                         tensors=tuple(catalog[t] for t in sorted(ids)), fragments=fragments,
                                         **common))
    unused = sorted(set(catalog) - used)
    if unused:
        raise ValueError(f"placement JSON contains an unreferenced tensor: {unused[0]}")
    return WeightPlacementManifest(placement_id=placement_id, topology=topology, parts=tuple(parts), **common)


__all__ = ["weight_placement_from_json", "weight_placement_to_json"]
