"""The data types and DataProto ref handles of Mooncake's ``mooncake.structured_object_store``.

Everything here is plain data with Mooncake's names, fields and checks, so code that builds,
passes around or serializes these objects (``dataproto_catalog``, trainers handing refs
between processes as JSON) works unchanged: the bundle policy and schema types, the read
specs (``StructuredObjectReadSpec`` with ``select_members``/``slice_member``), and
``export_dataproto_ref``/``import_dataproto_ref``, which turn a ``MooncakeDataProtoRef`` into
a JSON-safe handle (``{"type": "mooncake_dataproto_ref", "version": 1, "kind":
"bundle_stages", ...}``) and back, refusing handles of another type, version or kind.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

try:
    from typing import Protocol
except ImportError:  # pragma: no cover - Python < 3.8
    Protocol = object

__all__ = ["AUTO_PARALLEL_MIN_BYTES", "AUTO_PARALLEL_MIN_CHUNKS", "BundleStore", "BundleTransferPolicy",
           "FieldSchema", "RemoteBundleRef", "StructuredObjectPayload", "StructuredObjectResult",
           "StructuredFieldLocation", "MooncakeDataProtoRef", "StructuredMemberSlice", "StructuredObjectReadSpec",
           "DATAPROTO_REF_HANDLE_TYPE", "DATAPROTO_REF_HANDLE_VERSION", "STORAGE_GROUP_ID",
           "is_dataproto_ref_handle", "export_dataproto_ref", "import_dataproto_ref", "export_ref", "import_ref"]

AUTO_PARALLEL_MIN_BYTES = 64 << 20  # Mooncake's: one bundle chunk
AUTO_PARALLEL_MIN_CHUNKS = 8

DATAPROTO_REF_HANDLE_TYPE = "mooncake_dataproto_ref"
DATAPROTO_REF_HANDLE_VERSION = 1
STORAGE_GROUP_ID = "storage_group_id"  # optional top-level field of a handle (required by version 2)
_SECTIONS = ("batch", "non_tensor_batch")


class BundleStore(Protocol):
    """What a bundle transfer needs of a store: ``put``, ``get``, ``remove``."""

    def put(self, key, value, config=None): ...

    def get(self, key): ...

    def remove(self, key, force=False): ...


@dataclass(frozen=True)
class BundleTransferPolicy:
    """How a bundle is put: ``max_inflight_put``, ``put_mode`` (``auto``/``batch``/``parallel``),
    ``copy_mode`` (``auto``/``zero_copy``/``copy``)."""

    max_inflight_put: int = 1
    put_mode: str = "auto"
    copy_mode: str = "auto"


@dataclass(frozen=True)
class FieldSchema:
    """A codec hint for a DataProto field; ``metadata["section"]`` may pin its section."""

    codec: str
    nullable: bool = True
    metadata: dict = field(default_factory=dict)


@dataclass
class RemoteBundleRef:
    """A bundle in the store: the key of its manifest and the manifest (``{}`` until read)."""

    manifest_key: str
    manifest: dict


@dataclass(frozen=True, init=False)
class StructuredObjectPayload:
    """A structured object as metadata plus named buffers (``buffers`` is required)."""

    metadata: Mapping
    buffers: Mapping

    def __init__(self, metadata=None, buffers=None):
        if buffers is None:
            raise TypeError("StructuredObjectPayload requires buffers")
        object.__setattr__(self, "metadata", {} if metadata is None else metadata)
        object.__setattr__(self, "buffers", buffers)


@dataclass
class StructuredObjectResult:
    """A structured object read back: its metadata and its members."""

    metadata: dict
    objects: dict


@dataclass(frozen=True)
class StructuredFieldLocation:
    """Where a DataProto field lives: stage, member name, section."""

    stage: str
    member: str
    section: str


@dataclass
class MooncakeDataProtoRef:
    """A DataProto kept in the store as one bundle per stage, addressed by field."""

    batch_size: int
    stage_refs: dict
    field_index: dict
    meta_info: dict
    namespace: str = "default"
    partition: str = "default"
    global_indexes: Optional[list] = None
    encoded_non_tensor: dict = field(default_factory=dict)
    _storage_group_id: Optional[str] = field(default=None, repr=False)


@dataclass(frozen=True)
class StructuredMemberSlice:
    """A slice of one member along an axis."""

    axis: int
    start: int
    end: int
    step: int = 1


@dataclass(frozen=True)
class StructuredObjectReadSpec:
    """What to read of a structured object: some members, some of them sliced."""

    ref: Any
    member_names: Optional[tuple] = None
    member_slices: tuple = ()

    def select_members(self, names):
        return StructuredObjectReadSpec(self.ref, None if names is None else tuple(names), self.member_slices)

    def slice_member(self, name, axis, start, end, step=1):
        slices = dict(self.member_slices)
        slices[name] = StructuredMemberSlice(axis=axis, start=start, end=end, step=step)
        return StructuredObjectReadSpec(self.ref, self.member_names, tuple(slices.items()))

    def member_slice(self, name):
        return dict(self.member_slices).get(name)


def is_dataproto_ref_handle(value):
    return isinstance(value, Mapping) and value.get("type") == DATAPROTO_REF_HANDLE_TYPE


def _jsonable(value):
    """value with numpy scalars/arrays and tuples turned into JSON types; TypeError otherwise."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    tolist = getattr(value, "tolist", None)
    if tolist is not None and type(value).__module__ == "numpy":
        return _jsonable(tolist())
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    raise TypeError("DataProto ref handles support only JSON-safe values, got %s" % type(value).__name__)


def export_dataproto_ref(ref):
    """ref as a JSON-safe handle (``json.dumps`` of it always works)."""
    if not isinstance(ref, MooncakeDataProtoRef):
        raise TypeError("expected MooncakeDataProtoRef, got %s" % type(ref).__name__)
    handle = {
        "type": DATAPROTO_REF_HANDLE_TYPE,
        "version": DATAPROTO_REF_HANDLE_VERSION,
        "kind": "bundle_stages",
        "batch_size": int(ref.batch_size),
        "namespace": ref.namespace,
        "partition": ref.partition,
        "global_indexes": _jsonable(ref.global_indexes),
        "stage_refs": {stage: {"manifest_key": r.manifest_key} for stage, r in ref.stage_refs.items()},
        "field_index": {name: {"stage": loc.stage, "member": loc.member, "section": loc.section}
                        for name, loc in ref.field_index.items()},
        "meta_info": _jsonable(ref.meta_info),
        "encoded_non_tensor": _jsonable(ref.encoded_non_tensor),
    }
    if ref._storage_group_id is not None:
        handle[STORAGE_GROUP_ID] = ref._storage_group_id
    json.dumps(handle, ensure_ascii=False)
    return handle


def _mapping(value, name):
    if not isinstance(value, Mapping):
        raise ValueError("DataProto ref handle %s must be a mapping" % name)
    return value


def _nonempty(*values):
    return all(isinstance(v, str) and v for v in values)


def import_dataproto_ref(handle):
    """A handle from ``export_dataproto_ref`` (versions 1 and 2) back into a ``MooncakeDataProtoRef``;
    ``ValueError`` for anything else."""
    if not is_dataproto_ref_handle(handle):
        raise ValueError("not a Mooncake DataProto ref handle")
    try:
        version = int(handle.get("version", -1))
    except (TypeError, ValueError):
        version = -1
    if version not in (1, 2):
        raise ValueError("unsupported DataProto ref handle version: %r" % (handle.get("version"),))
    if handle.get("kind") != "bundle_stages":
        raise ValueError("unsupported DataProto ref handle kind: %r" % (handle.get("kind"),))
    stages = {}
    for stage, raw in _mapping(handle.get("stage_refs"), "stage_refs").items():
        key = _mapping(raw, "stage_refs[%r]" % (stage,)).get("manifest_key")
        if not _nonempty(stage, key):
            raise ValueError("DataProto ref handle stage refs must contain non-empty string names and "
                             "manifest_key values")
        stages[stage] = RemoteBundleRef(manifest_key=key, manifest={})
    fields = {}
    for name, raw in _mapping(handle.get("field_index"), "field_index").items():
        loc = _mapping(raw, "field_index[%r]" % (name,))
        section = loc.get("section")
        if section not in _SECTIONS:
            raise ValueError("invalid DataProto field section: %r" % (section,))
        stage, member = loc.get("stage"), loc.get("member")
        if not _nonempty(name, stage, member):
            raise ValueError("DataProto ref handle field locations must be non-empty strings")
        if stage not in stages:
            raise ValueError("DataProto ref handle field %r references unknown stage %r" % (name, stage))
        fields[name] = StructuredFieldLocation(stage=stage, member=member, section=section)
    group = handle.get(STORAGE_GROUP_ID)
    if (version == 2 and group is None) or (group is not None and not _nonempty(group)):
        raise ValueError("DataProto ref handle has invalid storage_group_id")
    indexes = handle.get("global_indexes")
    if indexes is not None:
        if not isinstance(indexes, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in indexes):
            raise ValueError("DataProto ref handle global_indexes must be a list of integers or null")
        indexes = list(indexes)
    if "batch_size" not in handle:
        raise ValueError("DataProto ref handle has no batch_size")
    return MooncakeDataProtoRef(
        batch_size=int(handle["batch_size"]),
        stage_refs=stages,
        field_index=fields,
        meta_info=dict(_mapping(handle.get("meta_info", {}), "meta_info")),
        namespace=str(handle.get("namespace", "default")),
        partition=str(handle.get("partition", "default")),
        global_indexes=indexes,
        encoded_non_tensor=dict(_mapping(handle.get("encoded_non_tensor", {}), "encoded_non_tensor")),
        _storage_group_id=group,
    )


export_ref = export_dataproto_ref
import_ref = import_dataproto_ref
