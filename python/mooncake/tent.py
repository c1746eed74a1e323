"""mooncake.tent: the Python API of TENT, Mooncake's next transfer engine, over this engine.

The names, values and calls of Mooncake's ``mooncake.tent`` module, mapped onto
``mooncake.engine.TransferEngine`` (the Go engine): segments are opened by name
(``"host:port"``, what ``get_segment_name()`` returns) and get small integer ids
(``LOCAL_SEGMENT_ID`` = 0 is this engine); a ``Request``'s ``target_offset`` is an address in
the target segment's registered memory (as in TENT for memory segments). A batch
(``allocate_transfer_batch``) collects the requests of any number of ``submit_transfer``
calls; task ids count them from 0; each submit sends its requests as one engine batch per
(target, opcode). A notification given to a submit is sent to each target after its
transfers of that submit succeeded. Failures raise TENT's exceptions (``TentException``
and its subclasses).

Configuration, as TENT's: a JSON file (``TransferEngine(config_path)``, else
``$MC_TENT_CONF``, a path or JSON text) with ``rpc_server_hostname`` (default
``127.0.0.1``), ``rpc_server_port`` (default: any), ``metadata_type`` (``p2p`` default,
``http``, ``etcd``) and ``metadata_servers``; ``transports/<name>/enable`` and other keys
are ignored (TCP and shared memory are chosen by the engine, ``MC_TENT_PROTOCOL`` picks
``tcp``/``shm``/``auto``).

Not as in TENT: ``cancel_transfer`` raises ``NotImplementedError`` (a running transfer
cannot be cancelled here); ``Permission`` and ``MemoryOptions.type``/``shm_path`` are
accepted and not enforced (registered memory is readable and writable by peers);
GPU locations (``cuda:N``) need a GPU and raise ``DeviceNotFoundError`` without one; file
segments (``file://``) raise ``NotImplementedError``.
"""

import enum
import json
import os
import threading

from . import _native
from . import engine as _engine

__all__ = [
    "LOCAL_SEGMENT_ID", "kWildcardLocation", "PRIO_HIGH", "PRIO_MEDIUM", "PRIO_LOW", "OpCode",
    "TransferStatusEnum", "Permission", "TransportType", "IntentType", "SegmentInfoType", "Notification",
    "Request", "TransferStatus", "SegmentInfoBuffer", "SegmentInfo", "MemoryOptions", "MemoryGuard",
    "BatchGuard", "TransferEngine", "TentException", "InvalidArgumentError", "AddressNotRegisteredError",
    "DeviceNotFoundError", "InvalidEntryError", "RdmaError", "CudaError", "MetadataError",
    "RpcServiceError", "InternalError", "NotImplementedError",
]

LOCAL_SEGMENT_ID = 0
kWildcardLocation = "*"
PRIO_HIGH, PRIO_MEDIUM, PRIO_LOW = 0, 1, 2


class TentException(Exception):
    pass


class InvalidArgumentError(TentException):
    pass


class AddressNotRegisteredError(TentException):
    pass


class DeviceNotFoundError(TentException):
    pass


class InvalidEntryError(TentException):
    pass


class RdmaError(TentException):
    pass


class CudaError(TentException):
    pass


class MetadataError(TentException):
    pass


class RpcServiceError(TentException):
    pass


class InternalError(TentException):
    pass


class NotImplementedError(TentException):  # noqa: A001 (TENT's name)
    pass


class OpCode(enum.IntEnum):
    READ = 0
    WRITE = 1


class TransferStatusEnum(enum.IntEnum):
    INITIAL = 0
    PENDING = 1
    INVALID = 2
    CANCELED = 3
    COMPLETED = 4
    TIMEOUT = 5
    FAILED = 6


class Permission(enum.IntEnum):
    LocalReadWrite = 0
    GlobalReadOnly = 1
    GlobalReadWrite = 2


class TransportType(enum.IntEnum):
    UNSPEC = 0
    RDMA = 1
    MNNVL = 2
    SHM = 3
    NVLINK = 4
    GDS = 5
    IOURING = 6
    TCP = 7
    AscendDirect = 8
    SUNRISE_LINK = 9
    TPU = 10
    UB = 11
    MPCOMM = 12


class IntentType(enum.IntEnum):
    INTENT_UNSPEC = 0
    FOREGROUND_GET = 1
    BACKGROUND_PREFETCH = 2
    MIGRATION = 3
    CHECKPOINT = 4
    WEIGHT_LOADING = 5
    STAGING_INTERNAL = 6


class SegmentInfoType(enum.IntEnum):
    Memory = 0
    File = 1


# pybind11's export_values: every enum value at module level too.
for _e in (OpCode, TransferStatusEnum, Permission, TransportType, IntentType, SegmentInfoType):
    for _m in _e:
        globals()[_m.name] = _m
del _e, _m


class Notification(object):
    def __init__(self, name="", msg=""):
        self.name, self.msg = name, msg

    def __repr__(self):
        return "Notification(name=%r, msg=%r)" % (self.name, self.msg)


class Request(object):
    def __init__(self, opcode=OpCode.READ, source=0, target_id=0, target_offset=0, length=0, priority=PRIO_HIGH,
                 transport_hint=TransportType.UNSPEC, policy_name=None, deadline_ns=0,
                 intent_type=IntentType.INTENT_UNSPEC):
        self.opcode = OpCode(opcode)
        self.source = int(source)
        self.target_id = int(target_id)
        self.target_offset = int(target_offset)
        self.length = int(length)
        self.priority = int(priority)
        self.transport_hint = TransportType(transport_hint)
        self.policy_name = policy_name
        self.deadline_ns = int(deadline_ns)
        self.intent_type = IntentType(intent_type)


class TransferStatus(object):
    def __init__(self, state=TransferStatusEnum.INITIAL, bytes=0):  # noqa: A002 (TENT's field name)
        self.state, self.bytes = TransferStatusEnum(state), int(bytes)

    def __repr__(self):
        return "TransferStatus(state=%s, bytes=%d)" % (self.state.name, self.bytes)


class SegmentInfoBuffer(object):
    def __init__(self, base=0, length=0, location=""):
        self.base, self.length, self.location = int(base), int(length), location


class SegmentInfo(object):
    def __init__(self, type=SegmentInfoType.Memory, buffers=None):  # noqa: A002
        self.type = SegmentInfoType(type)
        self.buffers = list(buffers or [])


class MemoryOptions(object):
    def __init__(self):
        self.location = kWildcardLocation
        self.perm = Permission.GlobalReadWrite
        self.type = TransportType.UNSPEC
        self.shm_path = ""
        self.shm_offset = 0
        self.internal = False


class _Guard(object):
    """Released on ``__exit__`` or when collected (``release()`` is idempotent)."""

    def __exit__(self, *exc):
        self.release()
        return None

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


class MemoryGuard(_Guard):
    """Memory from allocate_memory_guard: freed on ``__exit__``/``release()`` or collection."""

    def __init__(self, engine, addr, size):
        self._engine, self._addr, self._size = engine, addr, size

    def address(self):
        return self._addr

    def size(self):
        return self._size

    def release(self):
        addr, self._addr = self._addr, 0
        if addr:
            self._engine.free_local_memory(addr)

    def __enter__(self):
        return self._addr


class BatchGuard(_Guard):
    """A batch from allocate_batch_guard: freed on ``__exit__``/``release()`` or collection."""

    def __init__(self, engine, batch_id):
        self._engine, self._id, self._released = engine, batch_id, False

    def id(self):
        return self._id

    def release(self):
        if not self._released:
            self._released = True
            self._engine.free_transfer_batch(self._id)

    def __enter__(self):
        return self._id


def _load_config(config_path):
    src = config_path if config_path is not None else os.environ.get("MC_TENT_CONF", "")
    if not src:
        return {}
    text = src
    if not src.lstrip().startswith("{"):
        try:
            with open(src) as f:
                text = f.read()
        except OSError as exc:
            raise InvalidArgumentError("cannot read TENT config %s: %s" % (src, exc))
    try:
        conf = json.loads(text)
    except ValueError as exc:
        raise InvalidArgumentError("TENT config is not JSON: %s" % exc)
    if not isinstance(conf, dict):
        raise InvalidArgumentError("TENT config must be a JSON object")
    return conf


def _metadata_of(conf):
    kind = str(conf.get("metadata_type", "p2p")).lower()
    servers = str(conf.get("metadata_servers", ""))
    if kind in ("p2p", "", "p2phandshake"):
        return "P2PHANDSHAKE"
    if kind in ("http", "https", "etcd") and servers:
        return servers if "://" in servers else "%s://%s" % (kind, servers)
    raise InvalidArgumentError("unsupported metadata_type %r (p2p, http, etcd)" % kind)


class _Group(object):
    """One engine batch: the requests of one submit to one (target, opcode)."""

    def __init__(self, eng, bid, nbytes):
        self.eng, self.bid, self.nbytes = eng, bid, nbytes
        self.state = TransferStatusEnum.PENDING
        self.lock = threading.Lock()
        self.waiter = False  # a notification thread owns the engine batch

    def poll(self):
        with self.lock:
            if self.state != TransferStatusEnum.PENDING or self.waiter:
                return self.state
            rc = self.eng.transfer_check_status(self.bid)  # a final answer frees the engine batch
            if rc == 1:
                self.state = TransferStatusEnum.COMPLETED
            elif rc == -2:
                self.state = TransferStatusEnum.TIMEOUT
            elif rc < 0:
                self.state = TransferStatusEnum.FAILED
            return self.state

    def wait(self):
        with self.lock:
            if self.state != TransferStatusEnum.PENDING:
                return self.state
            self.waiter = True
        rc = self.eng.get_batch_transfer_status([self.bid])
        with self.lock:
            self.waiter = False
            self.state = TransferStatusEnum.COMPLETED if rc == 0 else TransferStatusEnum.FAILED
            return self.state


class _Batch(object):
    def __init__(self, capacity):
        self.capacity = capacity
        self.tasks = []  # task id -> (group, length)


class TransferEngine(object):
    def __init__(self, config_path=None):
        conf = _load_config(config_path)
        host = str(conf.get("rpc_server_hostname") or conf.get("local_segment_name") or "127.0.0.1")
        port = conf.get("rpc_server_port")
        if port and ":" not in host:
            host = "%s:%d" % (host, int(port))
        self._e = _engine.TransferEngine()
        protocol = os.environ.get("MC_TENT_PROTOCOL", "tcp")
        if self._e.initialize(host, _metadata_of(conf), protocol, "") != 0:
            raise RpcServiceError("TransferEngine: cannot start on %s: %s" % (host, _native.last_error()))
        self._lock = threading.Lock()
        self._segments = {LOCAL_SEGMENT_ID: self._e.get_session_id()}
        self._next_segment = 1
        self._batches = {}
        self._next_batch = 1
        self._alloc = {}

    # --- identity ---------------------------------------------------------
    def available(self):
        return self._e._h != 0

    def get_segment_name(self):
        return self._e.get_session_id()

    def get_rpc_server_address(self):
        return self._e.get_session_id().rsplit(":", 1)[0]

    def get_rpc_server_port(self):
        return self._e.get_rpc_port()

    def get_local_topology(self):
        return self._e.get_local_topology()

    # --- segments ---------------------------------------------------------
    def export_local_segment(self):
        return json.dumps({"type": "mooncake-go-segment", "name": self.get_segment_name()})

    def import_remote_segment(self, shared_handle):
        try:
            h = json.loads(shared_handle)
            name = h["name"] if isinstance(h, dict) and h.get("type") == "mooncake-go-segment" else None
        except (ValueError, TypeError, KeyError):
            name = None
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError("import_remote_segment: not a handle from export_local_segment")
        return self.open_segment(name)

    def open_segment(self, segment_name):
        if not isinstance(segment_name, str) or not segment_name:
            raise InvalidArgumentError("open_segment: empty segment name")
        if segment_name.startswith("file://"):
            raise NotImplementedError("open_segment: file segments are not supported")
        if segment_name == self.get_segment_name():
            return LOCAL_SEGMENT_ID
        self._buffers_of(segment_name)  # found, or MetadataError
        with self._lock:
            sid = self._next_segment
            self._next_segment += 1
            self._segments[sid] = segment_name
            return sid

    def close_segment(self, handle):
        with self._lock:
            if int(handle) == LOCAL_SEGMENT_ID:
                return None
            if self._segments.pop(int(handle), None) is None:
                raise InvalidArgumentError("close_segment: unknown segment id %d" % int(handle))

    def _name_of(self, sid):
        with self._lock:
            name = self._segments.get(int(sid))
        if name is None:
            raise InvalidArgumentError("unknown segment id %d" % int(sid))
        return name

    def _buffers_of(self, name):
        import ctypes

        out = ctypes.c_void_p()
        n = self._e._lib.mc_engine_segment(self._e._h, _native.cstr(name), ctypes.byref(out))
        if n < 0:
            raise MetadataError("segment %s: %s" % (name, _native.last_error()))
        return json.loads(_native.take_bytes(out.value, n) or b"[]")

    def get_segment_info(self, handle):
        name = self._name_of(handle)
        if int(handle) == LOCAL_SEGMENT_ID:
            bufs = json.loads(self._e.get_local_topology()).get("buffers") or []
        else:
            bufs = self._buffers_of(name)
        return SegmentInfo(SegmentInfoType.Memory,
                           [SegmentInfoBuffer(b["addr"], b["length"], b.get("location", "")) for b in bufs])

    # --- memory -----------------------------------------------------------
    def _check_location(self, location, what):
        loc = str(location or kWildcardLocation)
        if loc != kWildcardLocation and not loc.startswith("cpu"):
            raise DeviceNotFoundError("%s: location %s: only host memory (cpu, *) here" % (what, loc))

    def allocate_local_memory(self, size, location=kWildcardLocation):
        self._check_location(location, "allocate_local_memory")
        size = int(size)
        if size <= 0:
            raise InvalidArgumentError("allocate_local_memory: size must be positive")
        addr = self._e.allocate_managed_buffer(size)
        if not addr:
            raise InternalError("allocate_local_memory: %s" % _native.last_error())
        with self._lock:
            self._alloc[addr] = size
        return addr

    def allocate_local_memory_ex(self, size, options):
        return self.allocate_local_memory(size, options.location)

    def free_local_memory(self, addr):
        with self._lock:
            size = self._alloc.pop(int(addr), None)
        if size is None:
            raise InvalidArgumentError("free_local_memory: 0x%x was not allocated here" % int(addr))
        if self._e.free_managed_buffer(int(addr), size) != 0:
            raise InternalError("free_local_memory: %s" % _native.last_error())

    def allocate_memory_guard(self, size, location=kWildcardLocation):
        return MemoryGuard(self, self.allocate_local_memory(size, location), int(size))

    def allocate_memory_guard_ex(self, size, options):
        return self.allocate_memory_guard(size, options.location)

    def register_local_memory(self, addr, size, permission=Permission.GlobalReadWrite):
        if self._e.register_memory(int(addr), int(size)) != 0:
            raise InvalidArgumentError("register_local_memory: %s" % _native.last_error())

    def register_local_memory_ex(self, addr, size, options):
        self._check_location(options.location, "register_local_memory_ex")
        self.register_local_memory(addr, size, options.perm)

    def unregister_local_memory(self, addr, size=0):
        if self._e.unregister_memory(int(addr)) != 0:
            raise AddressNotRegisteredError("unregister_local_memory: %s" % _native.last_error())

    def register_local_memory_batch(self, addr_list, size_list, permission=Permission.GlobalReadWrite):
        if len(addr_list) != len(size_list):
            raise InvalidArgumentError("register_local_memory_batch: lists of different lengths")
        for a, s in zip(addr_list, size_list):
            self.register_local_memory(a, s, permission)

    def register_local_memory_batch_ex(self, addr_list, size_list, options):
        self._check_location(options.location, "register_local_memory_batch_ex")
        self.register_local_memory_batch(addr_list, size_list, options.perm)

    def unregister_local_memory_batch(self, addr_list, size_list=()):
        for a in addr_list:
            self.unregister_local_memory(a)

    # --- batches and transfers ---------------------------------------------
    def allocate_transfer_batch(self, batch_size):
        with self._lock:
            bid = self._next_batch
            self._next_batch += 1
            self._batches[bid] = _Batch(int(batch_size))
            return bid

    def allocate_batch_guard(self, batch_size):
        return BatchGuard(self, self.allocate_transfer_batch(batch_size))

    def free_transfer_batch(self, batch_id):
        with self._lock:
            b = self._batches.pop(int(batch_id), None)
        if b is None:
            raise InvalidArgumentError("free_transfer_batch: unknown batch %d" % int(batch_id))
        for g in {id(g): g for g, _ in b.tasks}.values():
            g.poll()  # settles (and frees) finished engine batches

    def _batch(self, batch_id):
        with self._lock:
            b = self._batches.get(int(batch_id))
        if b is None:
            raise InvalidArgumentError("unknown batch %d" % int(batch_id))
        return b

    def submit_transfer(self, batch_id, request_list, notifi=None):
        b = self._batch(batch_id)
        reqs = list(request_list)
        if len(b.tasks) + len(reqs) > b.capacity:
            raise InvalidArgumentError("submit_transfer: batch %d holds %d requests" % (int(batch_id), b.capacity))
        groups = {}
        for r in reqs:
            if r.length < 0:
                raise InvalidArgumentError("submit_transfer: negative length")
            groups.setdefault((self._name_of(r.target_id), OpCode(r.opcode)), []).append(r)
        made = {}
        for (target, op), rs in groups.items():
            fn = self._e.batch_transfer_async_write if op == OpCode.WRITE else self._e.batch_transfer_async_read
            ebid = fn(target, [r.source for r in rs], [r.target_offset for r in rs], [r.length for r in rs])
            if not ebid:
                err = _native.last_error()
                for g in made.values():  # the submit fails as a whole: settle what already started
                    g.wait()
                raise AddressNotRegisteredError("submit_transfer to %s: %s" % (target, err))
            made[(target, op)] = _Group(self._e, ebid, sum(r.length for r in rs))
        for r in reqs:
            b.tasks.append((made[(self._name_of(r.target_id), OpCode(r.opcode))], r.length))
        if notifi is not None:
            targets = sorted({t for t, _ in made})
            gs = list(made.values())

            def deliver():
                if all(g.wait() == TransferStatusEnum.COMPLETED for g in gs):
                    for t in targets:
                        self._e.send_notify(t, notifi.name, notifi.msg)

            threading.Thread(target=deliver, name="tent-notify", daemon=True).start()

    def submit_transfer_notif(self, batch_id, request_list, name, message):
        self.submit_transfer(batch_id, request_list, Notification(name, message))

    def cancel_transfer(self, batch_id, task_id):
        raise NotImplementedError("cancel_transfer: a running transfer cannot be cancelled here")

    def get_transfer_status(self, batch_id, task_id):
        b = self._batch(batch_id)
        if not 0 <= int(task_id) < len(b.tasks):
            raise InvalidArgumentError("get_transfer_status: no task %d in batch %d" % (int(task_id), int(batch_id)))
        g, n = b.tasks[int(task_id)]
        st = g.poll()
        return TransferStatus(st, n if st == TransferStatusEnum.COMPLETED else 0)

    def get_transfer_status_list(self, batch_id):
        return [self.get_transfer_status(batch_id, i) for i in range(len(self._batch(batch_id).tasks))]

    def get_transfer_status_overall(self, batch_id):
        sts = self.get_transfer_status_list(batch_id)
        total = sum(s.bytes for s in sts)
        states = {s.state for s in sts}
        for bad in (TransferStatusEnum.FAILED, TransferStatusEnum.TIMEOUT, TransferStatusEnum.CANCELED):
            if bad in states:
                return TransferStatus(bad, total)
        if not sts or states == {TransferStatusEnum.COMPLETED}:
            return TransferStatus(TransferStatusEnum.COMPLETED if sts else TransferStatusEnum.INITIAL, total)
        return TransferStatus(TransferStatusEnum.PENDING, total)

    # --- notifications ------------------------------------------------------
    def send_notifi(self, target_id, notifi):
        if self._e.send_notify(self._name_of(target_id), notifi.name, notifi.msg) != 0:
            raise RpcServiceError("send_notifi: %s" % _native.last_error())

    def recv_notifi(self):
        return [Notification(n.name, n.msg) for n in self._e.get_notifies()]

    def close(self):
        """Stops the engine (ours; TENT stops it on destruction)."""
        self._e.close()
