"""The module-level types of ``mooncake.store``, with Mooncake's names and values.

These mirror what Mooncake's pybind module exports (enums, ``ReplicateConfig``,
replica descriptors, task responses, tensor-parallel specs). They are plain
Python classes; ``mooncake.store`` re-exports every name here.
"""

import enum

__all__ = [
    "ObjectDataType", "SoftPinAction", "ReplicaStatus", "TaskType", "TaskStatus",
    "ReplicateConfig", "MemoryDescriptor", "DiskDescriptor", "ReplicaDescriptor", "Descriptor",
    "QueryTaskResponse", "ParallelAxis", "TensorParallelism", "ReadTarget", "UUID",
]

_U64_MAX = (1 << 64) - 1


class _Enum(enum.IntEnum):
    """An int enum that prints like a pybind11 enum (``SoftPinAction.ENABLE``)."""

    def __str__(self):
        return "%s.%s" % (type(self).__name__, self.name)

    def __repr__(self):
        return "<%s.%s: %d>" % (type(self).__name__, self.name, int(self))

    @property
    def value_name(self):
        return self.name


class ObjectDataType(_Enum):
    """What an object holds (a placement and eviction hint in Mooncake)."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class SoftPinAction(_Enum):
    """Requested soft-pin transition of a put or upsert."""

    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ReplicaStatus(_Enum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class TaskType(_Enum):
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(_Enum):
    PENDING = 0
    PROCESSING = 1
    FAILED = 2
    SUCCESS = 3


def _check_u64(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > _U64_MAX:
        raise TypeError("%s: incompatible value %r (an unsigned 64-bit int is required)" % (name, value))
    return int(value)


def _check_str_list(name, value):
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError("%s: a list of str is required, got %r" % (name, value))
    out = list(value)
    for v in out:
        if not isinstance(v, str):
            raise TypeError("%s: a list of str is required, got an item %r" % (name, v))
    return out


class ReplicateConfig(object):
    """Placement options of a put (Mooncake's ``ReplicateConfig``).

    Every field of Mooncake's struct is here with its default. The Go store
    honours ``replica_num``, ``soft_pin_action``/``soft_pin_ttl_ms``,
    ``with_hard_pin``, ``preferred_segment(s)`` and ``prefer_alloc_in_same_node``;
    the others (``nof_replica_num``, ``dfs_replica_num``, ``preferred_nof_segments``,
    ``data_type``, ``group_ids``, ``host_id``) are kept and ignored with a warning
    when they are set on a put. ``with_soft_pin`` is the older boolean spelling
    of ``soft_pin_action == SoftPinAction.ENABLE``.
    """

    def __init__(self, replica_num=1, with_soft_pin=None, with_hard_pin=False, preferred_segment="",
                 preferred_segments=None, prefer_alloc_in_same_node=False, soft_pin_action=SoftPinAction.PRESERVE,
                 soft_pin_ttl_ms=None, nof_replica_num=0, dfs_replica_num=0, preferred_nof_segments=None,
                 data_type=ObjectDataType.UNKNOWN, group_ids=None, host_id=""):
        self.replica_num = replica_num
        self.nof_replica_num = nof_replica_num
        self.dfs_replica_num = dfs_replica_num
        self.soft_pin_action = soft_pin_action
        if with_soft_pin is not None:
            self.with_soft_pin = with_soft_pin
        self.soft_pin_ttl_ms = soft_pin_ttl_ms
        self.with_hard_pin = with_hard_pin
        self.preferred_segments = list(preferred_segments or [])
        self.preferred_segment = preferred_segment
        self.preferred_nof_segments = list(preferred_nof_segments or [])
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node
        self.data_type = data_type
        self.group_ids = group_ids
        self.host_id = host_id

    # Typed fields (pybind11 raises TypeError on a value of the wrong type).

    @property
    def replica_num(self):
        return self._replica_num

    @replica_num.setter
    def replica_num(self, v):
        self._replica_num = _check_u64("replica_num", v)

    @property
    def nof_replica_num(self):
        return self._nof_replica_num

    @nof_replica_num.setter
    def nof_replica_num(self, v):
        self._nof_replica_num = _check_u64("nof_replica_num", v)

    @property
    def dfs_replica_num(self):
        return self._dfs_replica_num

    @dfs_replica_num.setter
    def dfs_replica_num(self, v):
        self._dfs_replica_num = _check_u64("dfs_replica_num", v)

    @property
    def soft_pin_action(self):
        return self._soft_pin_action

    @soft_pin_action.setter
    def soft_pin_action(self, v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError("soft_pin_action: a SoftPinAction is required, got %r" % (v,))
        self._soft_pin_action = SoftPinAction(int(v))

    @property
    def with_soft_pin(self):
        return self._soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, v):
        if v:
            self._soft_pin_action = SoftPinAction.ENABLE
        elif self._soft_pin_action == SoftPinAction.ENABLE:
            self._soft_pin_action = SoftPinAction.PRESERVE

    @property
    def soft_pin_ttl_ms(self):
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, v):
        self._soft_pin_ttl_ms = None if v is None else _check_u64("soft_pin_ttl_ms", v)

    @property
    def with_hard_pin(self):
        return self._with_hard_pin

    @with_hard_pin.setter
    def with_hard_pin(self, v):
        if not isinstance(v, bool):
            raise TypeError("with_hard_pin: a bool is required, got %r" % (v,))
        self._with_hard_pin = v

    @property
    def prefer_alloc_in_same_node(self):
        return self._same_node

    @prefer_alloc_in_same_node.setter
    def prefer_alloc_in_same_node(self, v):
        if not isinstance(v, bool):
            raise TypeError("prefer_alloc_in_same_node: a bool is required, got %r" % (v,))
        self._same_node = v

    @property
    def preferred_segment(self):
        return self._preferred_segment

    @preferred_segment.setter
    def preferred_segment(self, v):
        if not isinstance(v, str):
            raise TypeError("preferred_segment: a str is required, got %r" % (v,))
        self._preferred_segment = v

    @property
    def preferred_segments(self):
        return self._preferred_segments

    @preferred_segments.setter
    def preferred_segments(self, v):
        self._preferred_segments = _check_str_list("preferred_segments", v)

    @property
    def preferred_nof_segments(self):
        return self._preferred_nof_segments

    @preferred_nof_segments.setter
    def preferred_nof_segments(self, v):
        self._preferred_nof_segments = _check_str_list("preferred_nof_segments", v)

    @property
    def data_type(self):
        return self._data_type

    @data_type.setter
    def data_type(self, v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError("data_type: an ObjectDataType is required, got %r" % (v,))
        self._data_type = ObjectDataType(int(v))

    @property
    def group_ids(self):
        return self._group_ids

    @group_ids.setter
    def group_ids(self, v):
        self._group_ids = None if v is None else _check_str_list("group_ids", v)

    @property
    def host_id(self):
        return self._host_id

    @host_id.setter
    def host_id(self, v):
        if not isinstance(v, str):
            raise TypeError("host_id: a str is required, got %r" % (v,))
        self._host_id = v

    def segments(self):
        """preferred_segment (if set) followed by preferred_segments, without duplicates."""
        segs = list(self._preferred_segments)
        if self._preferred_segment and self._preferred_segment not in segs:
            segs.insert(0, self._preferred_segment)
        return segs

    def ignored_fields(self):
        """The fields set away from their defaults that the Go store does not honour."""
        out = []
        if self._nof_replica_num:
            out.append("nof_replica_num")
        if self._dfs_replica_num:
            out.append("dfs_replica_num")
        if self._preferred_nof_segments:
            out.append("preferred_nof_segments")
        if self._data_type != ObjectDataType.UNKNOWN:
            out.append("data_type")
        if self._group_ids is not None and any(self._group_ids):
            out.append("group_ids")
        if self._host_id:
            out.append("host_id")
        return out

    def __str__(self):
        return ("ReplicateConfig: { replica_num: %d, nof_replica_num: %d, dfs_replica_num: %d, soft_pin_action: %s, "
                "soft_pin_ttl_ms: %s, with_hard_pin: %s, preferred_segments: [%s], prefer_alloc_in_same_node: %s, "
                "data_type: %s }") % (
            self._replica_num, self._nof_replica_num, self._dfs_replica_num, self._soft_pin_action.name,
            "none" if self._soft_pin_ttl_ms is None else self._soft_pin_ttl_ms, str(self._with_hard_pin).lower(),
            ", ".join(self.segments()), str(self._same_node).lower(), self._data_type.name)

    __repr__ = __str__


class MemoryDescriptor(object):
    """Where a memory replica lives: ``buffer_descriptor`` is a :class:`Descriptor`."""

    def __init__(self, buffer_descriptor=None):
        self.buffer_descriptor = buffer_descriptor if buffer_descriptor is not None else Descriptor()

    def __repr__(self):
        return "MemoryDescriptor(%r)" % (self.buffer_descriptor,)


class DiskDescriptor(object):
    def __init__(self, file_path="", object_size=0):
        self.file_path = file_path
        self.object_size = object_size

    def __repr__(self):
        return "DiskDescriptor(file_path=%r, object_size=%d)" % (self.file_path, self.object_size)


class Descriptor(object):
    """An allocated buffer: its size, address and the transfer endpoint that serves it."""

    def __init__(self, size=0, buffer_address=0, transport_endpoint=""):
        self.size = size
        self.buffer_address = buffer_address
        self.transport_endpoint = transport_endpoint

    def __repr__(self):
        return "<Descriptor size=%d buffer_address=%d transport_endpoint=%s>" % (
            self.size, self.buffer_address, self.transport_endpoint)


class ReplicaDescriptor(object):
    """One replica of an object (``get_replica_desc``). The Go store holds memory replicas only."""

    def __init__(self, status=ReplicaStatus.COMPLETE, memory=None, disk=None, local_disk=False):
        self._status = ReplicaStatus(status)
        self._memory = memory
        self._disk = disk
        self._local_disk = local_disk

    @property
    def status(self):
        return self._status

    def is_memory_replica(self):
        return self._memory is not None

    def is_disk_replica(self):
        return self._disk is not None and not self._local_disk

    def is_local_disk_replica(self):
        return self._disk is not None and self._local_disk

    def get_memory_descriptor(self):
        if self._memory is None:
            raise RuntimeError("Replica is not a memory replica")
        return self._memory

    def get_disk_descriptor(self):
        if self._disk is None:
            raise RuntimeError("Replica is not a disk replica")
        return self._disk

    def __repr__(self):
        kind = "memory" if self._memory is not None else "disk"
        return "ReplicaDescriptor(status=%s, %s=%r)" % (self._status.name, kind, self._memory or self._disk)


class UUID(tuple):
    """A task id: Mooncake's ``UUID`` is a pair of 64-bit ints."""

    def __new__(cls, first=0, second=0):
        return tuple.__new__(cls, (int(first), int(second)))


class QueryTaskResponse(object):
    """Status of a copy/move task (``query_task``)."""

    def __init__(self, id=None, type=TaskType.REPLICA_COPY, status=TaskStatus.PENDING, created_at_ms_epoch=0,
                 last_updated_at_ms_epoch=0, assigned_client="", message=""):
        self._f = dict(id=id if id is not None else UUID(), type=TaskType(type), status=TaskStatus(status),
                       created_at_ms_epoch=created_at_ms_epoch, last_updated_at_ms_epoch=last_updated_at_ms_epoch,
                       assigned_client=assigned_client, message=message)

    id = property(lambda self: self._f["id"])
    type = property(lambda self: self._f["type"])
    status = property(lambda self: self._f["status"])
    created_at_ms_epoch = property(lambda self: self._f["created_at_ms_epoch"])
    last_updated_at_ms_epoch = property(lambda self: self._f["last_updated_at_ms_epoch"])
    assigned_client = property(lambda self: self._f["assigned_client"])
    message = property(lambda self: self._f["message"])

    def __repr__(self):
        f = self._f
        return ('QueryTaskResponse(id=%s, type=%d, status=%d, created_at=%d, last_updated_at=%d, '
                'assigned_client=%s, message="%s")') % (
            f["id"], int(f["type"]), int(f["status"]), f["created_at_ms_epoch"], f["last_updated_at_ms_epoch"],
            f["assigned_client"], f["message"])


class ParallelAxis(object):
    """One axis of a tensor's parallel layout (tensor API)."""

    def __init__(self):
        self.kind = ""
        self.rank = 0
        self.size = 1
        self.split_dim = None
        self.expert_id = None
        self.stage_id = None


class TensorParallelism(object):
    def __init__(self):
        self.axes = []


_READ_MODES = ("as_stored", "shard", "full")


class ReadTarget(object):
    """How a tensor read is shaped: ``mode`` is ``as_stored``, ``shard`` or ``full``."""

    def __init__(self):
        self._mode = "as_stored"
        self.parallelism = None

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, v):
        m = str(v).strip().lower()
        if m not in _READ_MODES:
            raise RuntimeError("Unsupported ReadTarget mode")
        self._mode = m
