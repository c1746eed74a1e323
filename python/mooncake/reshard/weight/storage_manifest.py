"""A committed Store snapshot of a weight generation: tensors and their stored fragments.

``WeightManifest`` names the Store group (``<group_id>/manifest`` and payload objects under
``<group_id>/payload/``), checks that the fragments exactly cover every tensor, that alias groups
are complete per geometry with identical descriptors, and that no two fragments share bytes of
one payload object. ``manifest_digest`` is the SHA-256 of ``to_json()`` (sorted keys, no
whitespace, UTF-8 kept).
"""

import hashlib
import json
from dataclasses import dataclass, field
from math import prod
from collections.abc import Mapping

from ..contracts import ResourceKind, StoredFragmentId, TensorId
from ..geometry import boxes_overlap
from . import _checks as _c
from .serde import _axis, _load, _seq
from .types import TensorDescriptor, _aliases, validate_fragment_geometry


@dataclass(frozen=True)
class StoredManifestIdentity:
    """Where a committed manifest lives in the Store and the digest of its content."""

    namespace: str
    resource_id: str
    revision: str
    weight_generation: int
    group_id: str
    manifest_key: str
    content_sha256: str

    def __post_init__(self):
        for name in ("namespace", "resource_id", "revision", "group_id", "manifest_key", "content_sha256"):
            _c.text(getattr(self, name), name)
        _c.u64(self.weight_generation, "weight_generation")
        if len(self.content_sha256) != 64 or self.content_sha256.strip("0123456789abcdef"):
            raise ValueError("content_sha256 must be a SHA-256 hex digest")


@dataclass(frozen=True)
class StoredFragment:
    """One stored box of a tensor: ``nbytes`` at ``object_offset`` of payload ``object_key``."""

    fragment_id: StoredFragmentId
    tensor_id: TensorId
    global_offset: tuple
    local_shape: tuple
    object_key: str
    object_offset: int
    nbytes: int
    aliases: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "global_offset", _c.integers(self.global_offset, "global_offset", 0))
        object.__setattr__(self, "local_shape", _c.integers(self.local_shape, "local_shape", 1))
        for name in ("fragment_id", "tensor_id", "object_key"):
            _c.text(getattr(self, name), name)
        _c.integer(self.object_offset, "object_offset", 0)
        _c.integer(self.nbytes, "nbytes", 1)
        group = _aliases(self.aliases)
        object.__setattr__(self, "aliases", group)
        if group:
            if len(group) < 2:
                raise ValueError("alias group must contain at least two tensor IDs")
            if self.tensor_id not in group:
                raise ValueError("alias group must contain the fragment tensor_id")

    def wire(self):
        return {"fragment_id": self.fragment_id, "tensor_id": self.tensor_id,
                "global_offset": list(self.global_offset), "local_shape": list(self.local_shape),
                "object_key": self.object_key, "object_offset": self.object_offset, "nbytes": self.nbytes,
                "aliases": list(self.aliases)}


_MANIFEST_FIELDS = frozenset({"resource_kind", "namespace", "resource_id", "revision", "weight_generation",
                              "group_id", "manifest_key", "tensors", "fragments", "created_at"})
_TENSOR_FIELDS = frozenset({"tensor_id", "global_shape", "dtype", "itemsize", "layer_id", "expert_id",
                            "layout_fingerprint", "shard_dims", "parallel_axes"})
_FRAGMENT_FIELDS = frozenset({"fragment_id", "tensor_id", "global_offset", "local_shape", "object_key",
                              "object_offset", "nbytes", "aliases"})


def _mapping(value, label):
    if not isinstance(value, Mapping) or any(type(k) is not str for k in value):
        raise ValueError(f"{label} must be a JSON object")
    return dict(value)


def _exact(value, fields, label):
    value = _mapping(value, label)
    if frozenset(value) != fields:
        raise ValueError(f"{label} schema fields do not match contract")
    return value


def _opt(value, label):
    return None if value is None else _c.integer(value, label, 0)


@dataclass(frozen=True)
class WeightManifest:
    """A committed, address-free Store snapshot of one weight generation."""

    namespace: str
    resource_id: str
    revision: str
    weight_generation: int
    group_id: str
    manifest_key: str
    tensors: tuple
    fragments: tuple
    created_at: str
    manifest_digest: str = field(init=False)

    @property
    def resource_kind(self):
        return ResourceKind.MODEL_WEIGHT

    def __post_init__(self):
        for name in ("namespace", "resource_id", "revision", "group_id", "manifest_key", "created_at"):
            _c.text(getattr(self, name), name)
        object.__setattr__(self, "tensors", _c.items(self.tensors, "WeightManifest tensors", TensorDescriptor))
        object.__setattr__(self, "fragments", _c.items(self.fragments, "WeightManifest fragments", StoredFragment))
        _c.u64(self.weight_generation, "weight_generation")
        if self.manifest_key != f"{self.group_id}/manifest":
            raise ValueError("manifest_key does not belong to manifest group")
        if any(not f.object_key.startswith(f"{self.group_id}/payload/") for f in self.fragments):
            raise ValueError("payload object_key does not belong to manifest group")
        _check_fragments(self.tensors, self.fragments)
        _check_aliases(self.tensors, self.fragments)
        _check_coverage(self.tensors, self.fragments)
        _check_object_ranges(self.fragments)
        object.__setattr__(self, "manifest_digest", hashlib.sha256(self.to_json().encode("utf-8")).hexdigest())

    @property
    def manifest_identity(self):
        return StoredManifestIdentity(namespace=self.namespace, resource_id=self.resource_id, revision=self.revision,
                                      weight_generation=self.weight_generation, group_id=self.group_id,
                                      manifest_key=self.manifest_key, content_sha256=self.manifest_digest)

    def to_json(self):
        raw = {"resource_kind": self.resource_kind.value, "namespace": self.namespace,
               "resource_id": self.resource_id, "revision": self.revision,
               "weight_generation": self.weight_generation, "group_id": self.group_id,
               "manifest_key": self.manifest_key, "tensors": [t.identity() for t in self.tensors],
               "fragments": [f.wire() for f in self.fragments], "created_at": self.created_at}
        return json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, value):
        return cls.from_dict(_mapping(_load(value, "weight manifest"), "weight manifest"))

    @classmethod
    def from_dict(cls, raw):
        raw = _exact(raw, _MANIFEST_FIELDS, "weight manifest")
        if raw["resource_kind"] != ResourceKind.MODEL_WEIGHT.value:
            raise ValueError("weight manifest resource_kind must be model_weight")
        tensors = []
        for i, item in enumerate(_seq(raw["tensors"], "WeightManifest tensors")):
            t = _exact(item, _TENSOR_FIELDS, "tensor descriptor")
            axes = tuple(_axis(a, j) for j, a in enumerate(_seq(t["parallel_axes"],
                                                                f"stored tensor parallel_axes {i}")))
            tensors.append(TensorDescriptor(
                tensor_id=_c.text(t["tensor_id"], "stored tensor tensor_id"),
                global_shape=_c.integers(t["global_shape"], "stored tensor global_shape", 1),
                dtype=_c.text(t["dtype"], "stored tensor dtype"),
                itemsize=_c.integer(t["itemsize"], "stored tensor itemsize", 1),
                layer_id=_opt(t["layer_id"], "stored tensor layer_id"),
                expert_id=_opt(t["expert_id"], "stored tensor expert_id"),
                layout_fingerprint=_c.text(t["layout_fingerprint"], "stored tensor layout_fingerprint"),
                shard_dims=_c.integers(t["shard_dims"], "stored tensor shard_dims", 0), parallel_axes=axes))
        fragments = []
        for item in _seq(raw["fragments"], "WeightManifest fragments"):
            f = _exact(item, _FRAGMENT_FIELDS, "stored fragment")
            fragments.append(StoredFragment(
                fragment_id=_c.text(f["fragment_id"], "stored fragment fragment_id"),
                tensor_id=_c.text(f["tensor_id"], "stored fragment tensor_id"),
                global_offset=_c.integers(f["global_offset"], "stored fragment global_offset", 0),
                local_shape=_c.integers(f["local_shape"], "stored fragment local_shape", 1),
                object_key=_c.text(f["object_key"], "stored fragment object_key"),
                object_offset=_c.integer(f["object_offset"], "stored fragment object_offset", 0),
                nbytes=_c.integer(f["nbytes"], "stored fragment nbytes", 1),
                aliases=tuple(_c.text(a, "stored fragment alias") for a in _seq(f["aliases"],
                                                                                 "stored fragment aliases"))))
        return cls(namespace=_c.text(raw["namespace"], "namespace"),
                   resource_id=_c.text(raw["resource_id"], "resource_id"),
                   revision=_c.text(raw["revision"], "revision"),
                   weight_generation=_c.u64(raw["weight_generation"], "weight_generation"),
                   group_id=_c.text(raw["group_id"], "group_id"),
                   manifest_key=_c.text(raw["manifest_key"], "manifest_key"), tensors=tuple(tensors),
                   fragments=tuple(fragments), created_at=_c.text(raw["created_at"], "created_at"))


def validate_weight_manifest_snapshot(manifest):
    """Rebuild ``manifest`` from its fields so a plan boundary trusts only a re-checked snapshot."""
    if not isinstance(manifest, WeightManifest):
        raise ValueError("weight manifest snapshot is invalid")
    try:
        return WeightManifest(namespace=manifest.namespace, resource_id=manifest.resource_id,
                              revision=manifest.revision, weight_generation=manifest.weight_generation,
                              group_id=manifest.group_id, manifest_key=manifest.manifest_key,
                              tensors=manifest.tensors, fragments=manifest.fragments,
                              created_at=manifest.created_at)
    except (AttributeError, TypeError) as error:
        raise ValueError("weight manifest snapshot is invalid") from error


def _check_fragments(tensors, fragments):
    by_id = {}
    for t in tensors:
        if t.tensor_id in by_id:
            raise ValueError(f"duplicate tensor_id: {t.tensor_id}")
        by_id[t.tensor_id] = t
    seen = set()
    for f in fragments:
        if f.fragment_id in seen:
            raise ValueError(f"duplicate fragment_id: {f.fragment_id}")
        seen.add(f.fragment_id)
        if f.tensor_id not in by_id:
            raise ValueError(f"unknown tensor_id: {f.tensor_id}")
        validate_fragment_geometry(by_id[f.tensor_id], fragment_id=f.fragment_id, global_offset=f.global_offset,
                                   local_shape=f.local_shape, nbytes=f.nbytes)


def _check_coverage(tensors, fragments):
    by_tensor, seen = {}, set()
    for f in fragments:
        key = (f.tensor_id, f.global_offset, f.local_shape)
        if key in seen:
            raise ValueError(f"duplicate fragment geometry: {f.tensor_id}")
        seen.add(key)
        by_tensor.setdefault(f.tensor_id, []).append((f.global_offset, f.local_shape))
    for t in tensors:
        boxes = by_tensor.get(t.tensor_id, [])
        if sum(prod(s) for _, s in boxes) != prod(t.global_shape) or boxes_overlap(tuple(boxes)):
            raise ValueError(f"tensor is not fully covered: {t.tensor_id}")


def _descriptor_key(t):
    return (t.global_shape, t.dtype, t.itemsize, t.shard_dims, t.parallel_axes, t.layer_id, t.expert_id,
            t.layout_fingerprint)


def _check_aliases(tensors, fragments):
    by_id = {t.tensor_id: t for t in tensors}
    groups = {}
    for f in fragments:
        if not f.aliases:
            continue
        unknown = sorted(set(f.aliases) - set(by_id))
        if unknown:
            raise ValueError(f"stored alias references unknown tensor: {unknown[0]}")
        groups.setdefault((f.aliases, f.global_offset, f.local_shape, f.nbytes), []).append(f)
    for (group, *_), members in groups.items():
        ids = {f.tensor_id for f in members}
        if ids != set(group):
            raise ValueError("stored alias group is incomplete for fragment geometry")
        if len({_descriptor_key(by_id[i]) for i in ids}) != 1:
            raise ValueError("stored alias tensor descriptors differ")


def _check_object_ranges(fragments):
    by_object = {}
    for f in fragments:
        by_object.setdefault(f.object_key, []).append(f)
    for key, items in by_object.items():
        items.sort(key=lambda f: f.object_offset)
        for a, b in zip(items, items[1:]):
            if b.object_offset < a.object_offset + a.nbytes:
                raise ValueError(f"stored fragment object ranges overlap: {a.fragment_id} and {b.fragment_id} "
                                 f"in {key}")


__all__ = ["StoredFragment", "StoredManifestIdentity", "WeightManifest", "validate_weight_manifest_snapshot"]
