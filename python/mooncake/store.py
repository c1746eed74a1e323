"""mooncake.store: a drop-in for Mooncake's ``mooncake.store`` module.

``MooncakeDistributedStore`` is backed by the Go store client through
libmooncake.so (see ``_native``); the module-level types (``SoftPinAction``,
``ReplicateConfig``, ``ReplicaStatus``, ``TaskType``, ...) are in
``_store_types`` and re-exported here with Mooncake's names and values.
Return conventions are Mooncake's:

* ``put``/``put_from``/``put_batch``/``upsert*``/``remove``/``register_buffer``/...
  return ``0`` or a negative Mooncake error code (``-600`` invalid params,
  ``-704`` object not found, ``-706`` object has a lease, ``-800`` transfer
  failed, ``-900`` RPC failed, ``-1012`` not supported here, ...);
* ``get`` returns the value, ``b""`` when it is missing or on error;
* ``get_into`` returns the number of bytes read, or a negative code;
* ``is_exist`` returns ``1``, ``0`` or ``-1``; ``get_size`` a size or a negative code;
* ``remove_by_regex``/``remove_all`` return the number removed or a negative code;
* ``health_check`` returns ``0`` healthy, ``1`` not set up, ``2`` master unreachable.

A failure never raises out of the native library: the reason is logged
(logger ``mooncake`` and the library's stderr log). Methods whose feature
the Go store does not have (draining the disk tier, CUDA reads, ...) log why
and return Mooncake's failure value for their return type; docs/python.md
lists every entry of Mooncake's surface with its status.

``setup()`` takes Mooncake's positional and keyword arguments, or one config
dict / ``mooncake.mooncake_config.MooncakeConfig`` object; positional arguments left out (or ``None``)
come from ``MOONCAKE_CONFIG_PATH`` or the ``MOONCAKE_*`` environment (see
``mooncake.config``).
"""

import ctypes
import json
import logging
import os
import random
import socket
import threading
import urllib.parse

from . import _native, _tensor
from ._tensor_api import TensorAPI
from ._store_types import (UUID, Descriptor, DiskDescriptor, MemoryDescriptor, ObjectDataType, ParallelAxis,
                           QueryTaskResponse, ReadTarget, ReplicaDescriptor, ReplicaStatus, ReplicateConfig,
                           SoftPinAction, TaskStatus, TaskType, TensorParallelism)
from . import config as _config
from .config import parse_size

log = logging.getLogger("mooncake")

__all__ = [
    "MooncakeDistributedStore", "ReplicateConfig", "ErrorCode", "BufferHandle", "SoftPinAction", "ObjectDataType",
    "ReplicaStatus", "TaskType", "TaskStatus", "QueryTaskResponse", "MemoryDescriptor", "DiskDescriptor",
    "ReplicaDescriptor", "Descriptor", "ParallelAxis", "TensorParallelism", "ReadTarget", "UUID",
    "MooncakeHostMemAllocator", "MooncakeDistributedNoFRegister", "BufferPool", "BufferLease",
    "BufferLeaseView", "RegisteredBufferPool", "RegisteredBufferLease", "RegisteredBufferLeaseView",
    "bind_to_numa_node", "get_alloc_func_addr", "get_free_func_addr",
]

# Mooncake exports the values of these enums at module level too (export_values);
# TaskStatus comes last there, so PROCESSING and FAILED are TaskStatus values.
for _enum in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
    for _m in _enum:
        globals()[_m.name] = _m
del _enum, _m


class ErrorCode(object):
    """Mooncake store error codes (negative ints)."""

    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SEGMENT_NOT_FOUND = -101
    NO_AVAILABLE_HANDLE = -200
    INVALID_KEY = -400
    INVALID_PARAMS = -600
    INVALID_REPLICA = -702
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    LEASE_EXPIRED = -707
    REPLICA_NOT_FOUND = -710
    TRANSFER_FAIL = -800
    RPC_FAIL = -900
    RPC_TIMEOUT = -901
    NOT_SUPPORTED = -1012


# health_check results (Mooncake's HC_* values).
HC_HEALTHY = 0
HC_NOT_INITIALIZED = 1
HC_MASTER_UNREACHABLE = 2

# Mooncake picks a store client's RPC port in this range when local_hostname has none.
_PORT_RANGE = (12300, 14300)


def _key(key):
    if isinstance(key, bytes):
        return key
    return str(key).encode("utf-8")


def _keys(keys):
    arr = (ctypes.c_char_p * len(keys))()
    for i, k in enumerate(keys):
        arr[i] = _key(k)
    return arr


def _buffer_ptr(value):
    """Returns (keepalive, address, length) for a bytes-like value, without copying when it can."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, bytes):
        if not value:
            return value, 0, 0
        return value, ctypes.cast(ctypes.c_char_p(value), ctypes.c_void_p).value or 0, len(value)
    ai = getattr(value, "__array_interface__", None)
    if ai is not None and ai.get("strides") is None and isinstance(ai.get("data"), tuple):
        return value, int(ai["data"][0]), int(value.nbytes)
    mv = memoryview(value)
    if mv.nbytes == 0:
        return b"", 0, 0
    if mv.readonly or not mv.c_contiguous:
        return _buffer_ptr(mv.tobytes())
    buf = (ctypes.c_char * mv.nbytes).from_buffer(value)
    return buf, ctypes.addressof(buf), mv.nbytes


def _has_port(host):
    host = host.strip()
    if host.startswith("["):
        return "]:" in host
    return host.count(":") == 1 and host.rsplit(":", 1)[1].isdigit()


def _free_port(host):
    """A port in Mooncake's range that is free on host right now (0 when none is found)."""
    lo, hi = _PORT_RANGE
    for _ in range(64):
        port = random.randint(lo, hi)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((host if host not in ("localhost",) else "127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    return 0


def _bool(v):
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("1", "true", "yes", "on", "enable"):
            return True
        if s in ("", "0", "false", "no", "off", "disable"):
            return False
        raise ValueError("not a boolean: %r" % (v,))
    return bool(v)


# Mooncake's FileStorage defaults (mooncake-store/include/storage_backend.h).
_SSD_DEFAULT_PATH = "/data/file_storage"
_SSD_DEFAULT_CAPACITY = 2 << 40


def _ssd_offload_options(path):
    """The disk tier behind this client's segment for setup(enable_ssd_offload=True): the
    directory is ssd_offload_path, else MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, else Mooncake's
    /data/file_storage; at most MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES (2 TB) are kept. Objects
    go to disk when the master evicts them from this client's segment (offload on evict, the
    only mode here); values read from disk are put back into memory unless
    MOONCAKE_PROMOTION_ON_HIT is false."""
    env = os.environ
    directory = str(path or env.get("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH") or _SSD_DEFAULT_PATH)
    capacity = parse_size(env.get("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES") or _SSD_DEFAULT_CAPACITY)
    if capacity <= 0:
        raise ValueError("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES must be positive")
    return {"dir": os.path.abspath(directory), "capacity": int(capacity), "offload_on_evict": True,
            "promotion_on_hit": _bool(env.get("MOONCAKE_PROMOTION_ON_HIT", "true"))}


class BufferHandle(bytearray):
    """A value held in memory owned by this process (``get_buffer``'s result).

    ``ptr()``/``size()``/``len()`` as in Mooncake, and the buffer protocol:
    ``memoryview(h)``, ``bytes(h)``, ``numpy.frombuffer(h, ...)`` work. The
    memory cannot move (its size is fixed), so ``ptr()`` stays valid while the
    handle lives.
    """

    def __init__(self, data=b""):
        super().__init__(data)
        # An exported ctypes view pins the memory: a resize would fail instead of moving it.
        self._pin = (ctypes.c_char * len(self)).from_buffer(self) if len(self) else None

    def ptr(self):
        """Address of the first byte (0 for an empty value)."""
        return ctypes.addressof(self._pin) if self._pin is not None else 0

    def size(self):
        return len(self)

    def tobytes(self):
        return bytes(self)

    def __repr__(self):
        return "<BufferHandle ptr=0x%x size=%d>" % (self.ptr(), len(self))

    __hash__ = object.__hash__


class MooncakeDistributedStore(TensorAPI, _native.Closable):
    """Client of a Mooncake store cluster (a master plus storage nodes)."""

    def __init__(self):
        self._lib = _native.lib()
        self._h = 0
        self._lock = threading.Lock()
        self._regs = {}  # registered buffers: address -> size
        self.config = None

    # --- lifecycle -------------------------------------------------------

    def setup(self, local_hostname=None, metadata_server=None, global_segment_size=None, local_buffer_size=None,
              protocol=None, rdma_devices=None, master_server_addr=None, engine=None, enable_ssd_offload=False,
              ssd_offload_path="", tenant_id="default", enable_client_http_server=False, client_http_port=9300,
              config=None):
        """Connects to the master and, when global_segment_size > 0, contributes that much memory.

        Mooncake's two forms: ``setup(local_hostname, metadata_server, global_segment_size,
        local_buffer_size, protocol, rdma_devices, master_server_addr, engine=None,
        enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
        enable_client_http_server=False, client_http_port=9300)`` and ``setup(config)`` with a
        dict (Mooncake's keys) or a MooncakeConfig object. Positional arguments left out come
        from MOONCAKE_CONFIG_PATH / MOONCAKE_* (mooncake.config). Sizes may be strings
        ("16MB", "4gb"). ``enable_ssd_offload=True`` puts a disk tier behind this client's
        segment (``ssd_offload_path``, else ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH``); tenants
        and the client HTTP server are accepted and ignored with a warning. Returns 0, or a negative code.
        """
        if config is None and local_hostname is not None and not isinstance(local_hostname, (str, bytes)):
            config, local_hostname = local_hostname, None
        if config is not None:
            return self._setup_config(config)
        if self._h:
            log.error("mooncake: setup: store already set up")
            return ErrorCode.INVALID_PARAMS
        try:
            cfg = _config.load_from_env()
            if local_hostname is not None:
                cfg.local_hostname = str(local_hostname)
            if metadata_server is not None:
                cfg.metadata_server = str(metadata_server)
            if global_segment_size is not None:
                cfg.global_segment_size = parse_size(global_segment_size)
            if local_buffer_size is not None:
                cfg.local_buffer_size = parse_size(local_buffer_size)
            if protocol is not None:
                cfg.protocol = str(protocol).strip().lower()
            if rdma_devices is not None:
                cfg.device_name = str(rdma_devices)
            if master_server_addr is not None:
                cfg.master_server_address = str(master_server_addr)
            ssd = _bool(enable_ssd_offload)
            http = _bool(enable_client_http_server)
        except (ValueError, OSError) as exc:
            log.error("mooncake: setup: bad configuration: %s", exc)
            return ErrorCode.INVALID_PARAMS
        if engine is not None:
            log.warning("mooncake: setup: sharing a TransferEngine is not supported; the store uses its own")
        disk = None
        if ssd and cfg.global_segment_size == 0:
            log.warning("mooncake: setup: SSD offload needs a global segment: with global_segment_size=0 this "
                        "client holds no objects to offload; no disk tier")
        elif ssd:
            try:
                disk = _ssd_offload_options(ssd_offload_path)
            except ValueError as exc:
                log.error("mooncake: setup: bad SSD offload setting: %s", exc)
                return ErrorCode.INVALID_PARAMS
        elif ssd_offload_path:
            log.warning("mooncake: setup: ssd_offload_path %r is ignored without enable_ssd_offload=True",
                        ssd_offload_path)
        if tenant_id not in (None, "", "default"):
            log.warning("mooncake: setup: tenants are not supported; tenant_id %r is ignored", tenant_id)
        if http:
            log.warning("mooncake: setup: the client HTTP server (port %s) is not supported; not started",
                        client_http_port)
        return self._open(cfg, disk)

    def _setup_config(self, config):
        """setup(config): a dict with Mooncake's keys, or an object with MooncakeConfig's attributes."""
        if not isinstance(config, dict):
            d = {}
            for k in ("local_hostname", "metadata_server", "global_segment_size", "local_buffer_size", "protocol",
                      "device_name", "master_server_address", "enable_ssd_offload", "ssd_offload_path", "tenant_id",
                      "enable_client_http_server", "client_http_port"):
                if getattr(config, k, None) is not None:
                    d[k] = getattr(config, k)
            config = d
        d = dict(config)
        for missing in ("local_hostname", "metadata_server"):
            if not str(d.get(missing) or "").strip():
                log.error("mooncake: setup: config is missing %r", missing)
                return ErrorCode.INVALID_PARAMS
        known = {"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size", "protocol",
                 "rdma_devices", "device_name", "master_server_addr", "master_server_address", "ipc_socket_path",
                 "enable_ssd_offload", "ssd_offload_path", "tenant_id", "enable_client_http_server",
                 "client_http_port"}
        for k in sorted(set(d) - known):
            log.warning("mooncake: setup: unknown config key %r ignored", k)
        if d.get("ipc_socket_path"):
            log.warning("mooncake: setup: ipc_socket_path is not used (dummy clients attach with setup_dummy); ignored")
        return self.setup(
            str(d["local_hostname"]), str(d["metadata_server"]),
            d.get("global_segment_size", 16 * 1024 * 1024), d.get("local_buffer_size", 16 * 1024 * 1024),
            d.get("protocol", "tcp"), d.get("rdma_devices", d.get("device_name", "")) or "",
            d.get("master_server_addr", d.get("master_server_address", "127.0.0.1:50051")),
            enable_ssd_offload=d.get("enable_ssd_offload", False), ssd_offload_path=d.get("ssd_offload_path") or "",
            tenant_id=d.get("tenant_id") or "default",
            enable_client_http_server=d.get("enable_client_http_server", False),
            client_http_port=d.get("client_http_port", 9300))

    def _open(self, cfg, disk=None):
        host = cfg.local_hostname
        if host and not _has_port(host) and not host.startswith("["):
            port = _free_port(host)
            if port:
                host = "%s:%d" % (host, port)
        with self._lock:
            if self._h:
                log.error("mooncake: setup: store already set up")
                return ErrorCode.INVALID_PARAMS
            opts = json.dumps({"disk": disk}) if disk else ""
            h = self._lib.mc_store_open_ex(_native.cstr(host), _native.cstr(cfg.metadata_server),
                                           cfg.global_segment_size, cfg.local_buffer_size, _native.cstr(cfg.protocol),
                                           _native.cstr(cfg.device_name), _native.cstr(cfg.master_server_address),
                                           _native.cstr(opts))
            if h <= 0:
                log.error("mooncake: setup: %s", _native.last_error())
                return int(h) if h < 0 else ErrorCode.INTERNAL_ERROR
            self._h = h
            self._regs = {}
            self.config = cfg
        return 0

    def init_all(self, protocol, device_name, mount_segment_size=16 * 1024 * 1024):
        """Mooncake's older entry point: setup from the environment with these overrides."""
        return self.setup(protocol=protocol, rdma_devices=device_name, global_segment_size=mount_segment_size)

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """Becomes a dummy client of the real client (``mooncake client``) serving
        server_address ("host:port") on this host: every call is served by it, and
        mem_pool_size bytes of memory shared with it back alloc_from_mem_pool (buffers
        there move without a copy). local_buffer_size is accepted for Mooncake's
        signature. Returns 0, or a negative code (no real client there: -1)."""
        with self._lock:
            if self._h:
                log.error("mooncake: setup_dummy: store already set up")
                return ErrorCode.INVALID_PARAMS
            h = self._lib.mc_store_open_dummy(int(mem_pool_size), int(local_buffer_size),
                                              _native.cstr(str(server_address)))
            if h <= 0:
                log.error("mooncake: setup_dummy: %s", _native.last_error())
                return int(h) if h < 0 else ErrorCode.INTERNAL_ERROR
            self._h = h
            self._regs = {}
            self.config = None
        return 0

    def alloc_from_mem_pool(self, size):
        """size bytes of a dummy client's shared pool: the address, 0 when this is not a
        dummy client or the pool is used up."""
        if not self._h:
            log.error("mooncake: alloc_from_mem_pool: store not set up")
            return 0
        p = self._lib.mc_store_alloc_from_pool(self._h, int(size))
        if not p:
            log.error("mooncake: alloc_from_mem_pool: %s", _native.last_error())
            return 0
        return int(p)

    def close(self):
        """Unmounts this client's segment and disconnects. Returns 0."""
        with self._lock:
            h, self._h = self._h, 0
            self._regs = {}
            self._put_sessions, self._get_sessions = {}, {}  # sessions end with the client
        if not h:
            return 0
        rc = self._lib.mc_store_close(h)
        if rc < 0:
            log.error("mooncake: close: %s", _native.last_error())
            return int(rc)
        return 0

    def _ready(self, what):
        if not self._h:
            log.error("mooncake: %s: store not set up", what)
            return False
        return True

    def _rc(self, what, rc, quiet=()):
        rc = int(rc)
        if rc < 0 and rc not in quiet:
            log.error("mooncake: %s: %s", what, _native.last_error())
        return rc

    @staticmethod
    def _unsupported(what, why, result):
        log.error("mooncake: %s: not supported: %s", what, why)
        return result

    def health_check(self):
        """0 when the master answers, 1 when not set up, 2 when the master is unreachable."""
        if not self._h:
            return HC_NOT_INITIALIZED
        rc = self._lib.mc_store_health(self._h)
        if rc < 0:
            log.error("mooncake: health_check: %s", _native.last_error())
            return HC_MASTER_UNREACHABLE
        return HC_HEALTHY

    def get_hostname(self):
        """This client's "host:port": its local_hostname (its segment's name), as Mooncake returns it,
        also when that port was taken and the transfer engine runs on another; "" before setup."""
        if not self._h:
            return ""
        buf = ctypes.create_string_buffer(512)
        n = self._lib.mc_store_hostname(self._h, buf, len(buf))
        if n < 0:
            return self.config.local_hostname if self.config else ""
        return buf.value.decode("utf-8", "replace")

    # --- put family ------------------------------------------------------

    def _cfg(self, what, config, upsert=False):
        """The put_ex JSON for config, or None (logged) when config is invalid."""
        if config is None and not upsert:
            return b""
        if config is None:
            config = ReplicateConfig()
        if not isinstance(config, ReplicateConfig):
            raise TypeError("%s(): config must be a mooncake.store.ReplicateConfig, got %s" % (
                what, type(config).__name__))
        if config.replica_num == 0:
            log.error("mooncake: %s: replica_num must be at least 1", what)
            return None
        if config.soft_pin_ttl_ms is not None and config.soft_pin_action != SoftPinAction.ENABLE:
            log.error("mooncake: %s: soft_pin_ttl_ms is only valid with soft_pin_action=ENABLE", what)
            return None
        if config.soft_pin_action == SoftPinAction.ENABLE and config.soft_pin_ttl_ms == 0:
            log.error("mooncake: %s: soft_pin_ttl_ms must be positive", what)
            return None
        ignored = config.ignored_fields()
        if ignored:
            log.warning("mooncake: %s: ReplicateConfig fields not supported by this store, ignored: %s",
                        what, ", ".join(ignored))
        return json.dumps({
            "replica_num": int(config.replica_num),
            "soft_pin": config.soft_pin_action == SoftPinAction.ENABLE,
            "soft_pin_ttl_ms": int(config.soft_pin_ttl_ms or 0),
            "with_hard_pin": bool(config.with_hard_pin),
            "preferred_segments": config.segments(),
            "prefer_alloc_in_same_node": bool(config.prefer_alloc_in_same_node),
            "upsert": bool(upsert),
            "keep_soft_pin": config.soft_pin_action == SoftPinAction.PRESERVE,
        }).encode()

    def _registered(self, ptr, n):
        for base, size in list(self._regs.items()):
            if base <= ptr and ptr + n <= base + size:
                return True
        return False

    def _staged(self, what, ptr, n):
        """False (logged) when a copy-path put cannot run: this client has no local buffer."""
        if self.config is not None and self.config.local_buffer_size == 0 and n > 0 and not self._registered(ptr, n):
            log.error("mooncake: %s: local_buffer_size is 0: only registered memory can be put", what)
            return False
        return True

    def _put1(self, what, key, ptr, n, config, upsert, copy_path):
        """One put of [ptr, +n); copy_path: the memory is the caller's value, not registered memory."""
        if not self._ready(what):
            return ErrorCode.INVALID_PARAMS
        cfg = self._cfg(what, config, upsert)
        if cfg is None:
            return ErrorCode.INVALID_PARAMS
        if copy_path and not self._staged(what, ptr, n):
            return ErrorCode.INVALID_PARAMS
        return self._rc(what, self._lib.mc_store_put_ex(self._h, _key(key), ptr or None, n, cfg))

    def put(self, key, value, config=None):
        """Stores value (bytes-like) under key. A key that exists is left as is. 0 or negative."""
        keep, ptr, n = _buffer_ptr(value)
        rc = self._put1("put", key, ptr, n, config, False, True)
        del keep
        return rc

    def upsert(self, key, value, config=None):
        """Stores value under key, replacing the current value. 0 or negative."""
        keep, ptr, n = _buffer_ptr(value)
        rc = self._put1("upsert", key, ptr, n, config, True, True)
        del keep
        return rc

    def put_from(self, key, buffer_ptr, size, config=None):
        """Stores [buffer_ptr, +size) of process memory under key. 0 or negative."""
        return self._put1("put_from", key, int(buffer_ptr), int(size), config, False, False)

    def upsert_from(self, key, buffer_ptr, size, config=None):
        """upsert from [buffer_ptr, +size). 0 or negative."""
        return self._put1("upsert_from", key, int(buffer_ptr), int(size), config, True, False)

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size, metadata_size, config=None):
        """Stores the metadata bytes followed by the data bytes as one object. 0 or negative."""
        if int(size) < 0 or int(metadata_size) < 0 or (size and not buffer_ptr) or (metadata_size and
                                                                                     not metadata_buffer_ptr):
            log.error("mooncake: put_from_with_metadata: bad buffer")
            return ErrorCode.INVALID_PARAMS
        value = ctypes.string_at(int(metadata_buffer_ptr), int(metadata_size)) if metadata_size else b""
        value += ctypes.string_at(int(buffer_ptr), int(size)) if size else b""
        keep, ptr, n = _buffer_ptr(value)
        rc = self._put1("put_from_with_metadata", key, ptr, n, config, False, False)
        del keep
        return rc

    def _parts(self, parts):
        for p in parts:
            mv = memoryview(p)
            if mv.ndim > 1 or mv.itemsize != 1:
                raise RuntimeError("parts must be 1-D bytes-like")
        return b"".join(bytes(memoryview(p)) for p in parts)

    def put_parts(self, key, *parts, config=None):
        """Stores the concatenation of several bytes-like parts. 0 or negative."""
        return self.put(key, self._parts(parts), config)

    def upsert_parts(self, key, *parts, config=None):
        """Upserts the concatenation of several bytes-like parts. 0 or negative."""
        return self.upsert(key, self._parts(parts), config)

    def _batch(self, what, keys, ptrs, sizes, config, upsert, copy_path):
        n = len(keys)
        if not self._ready(what):
            return [ErrorCode.INTERNAL_ERROR] * n
        if not (n == len(ptrs) == len(sizes)):
            log.error("mooncake: %s: lists of different lengths", what)
            return [ErrorCode.INVALID_PARAMS] * n
        if n == 0:
            return []
        cfg = self._cfg(what, config, upsert)
        if cfg is None:
            return [ErrorCode.INVALID_PARAMS] * n
        if copy_path and any(not self._staged(what, int(p), int(s)) for p, s in zip(ptrs, sizes)):
            return [ErrorCode.INVALID_PARAMS] * n
        out = (ctypes.c_int64 * n)()
        rc = self._lib.mc_store_batch_put_ex(self._h, n, _keys(keys), _native.ptr_array(ptrs),
                                             _native.u64_array(sizes), cfg, out)
        if rc < 0:
            self._rc(what, rc)
            return [int(rc)] * n
        res = [int(x) for x in out]
        if any(x < 0 for x in res):
            log.error("mooncake: %s: %s", what, _native.last_error())
        return res

    def _first_error(self, res):
        for rc in res:
            if rc < 0:
                return rc
        return 0

    def _put_values(self, what, keys, values, config, upsert):
        if len(keys) != len(values):
            log.error("mooncake: %s: %d keys but %d values", what, len(keys), len(values))
            return ErrorCode.INVALID_PARAMS
        bufs = [_buffer_ptr(v) for v in values]
        res = self._batch(what, keys, [b[1] for b in bufs], [b[2] for b in bufs], config, upsert, True)
        del bufs
        return self._first_error(res)

    def put_batch(self, keys, values, config=None):
        """Stores several values. 0 when all succeeded, else the first negative code."""
        return self._put_values("put_batch", keys, values, config, False)

    def upsert_batch(self, keys, values, config=None):
        """Upserts several values. 0 when all succeeded, else the first negative code."""
        return self._put_values("upsert_batch", keys, values, config, True)

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        """Stores several memory ranges; a list with one code per key."""
        return self._batch("batch_put_from", keys, buffer_ptrs, sizes, config, False, False)

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        """Upserts several memory ranges; a list with one code per key."""
        return self._batch("batch_upsert_from", keys, buffer_ptrs, sizes, config, True, False)

    @staticmethod
    def _per_key_ranges(what, keys, all_buffer_ptrs, all_sizes, one):
        """one(key, ptrs, sizes) for each key with valid memory ranges; a code per key
        (INVALID_PARAMS for the lists of different lengths or a key's bad ranges)."""
        if not (len(keys) == len(all_buffer_ptrs) == len(all_sizes)):
            log.error("mooncake: %s: lists of different lengths", what)
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        out = []
        for key, ptrs, sizes in zip(keys, all_buffer_ptrs, all_sizes):
            if len(ptrs) != len(sizes) or any(int(p) == 0 for p in ptrs) or any(int(n) < 0 for n in sizes):
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            out.append(one(key, ptrs, sizes))
        return out

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        """Stores, for each key, the concatenation of several memory ranges; one code per key."""
        def one(key, ptrs, sizes):
            value = b"".join(ctypes.string_at(int(p), int(n)) for p, n in zip(ptrs, sizes))
            keep, ptr, n = _buffer_ptr(value)
            rc = self._put1("batch_put_from_multi_buffers", key, ptr, n, config, False, False)
            del keep
            return rc
        return self._per_key_ranges("batch_put_from_multi_buffers", keys, all_buffer_ptrs, all_sizes, one)

    # --- get family ------------------------------------------------------

    def _get_rc(self, key, quiet=True):
        """(rc, value): rc is the length or a negative code."""
        if not self._h:
            log.error("mooncake: get: store not set up")
            return ErrorCode.INTERNAL_ERROR, b""
        out = ctypes.c_void_p()
        n = self._lib.mc_store_get(self._h, _key(key), ctypes.byref(out))
        if n < 0:
            self._rc("get", n, quiet=(ErrorCode.OBJECT_NOT_FOUND,) if quiet else ())
            return int(n), b""
        return int(n), _native.take_bytes(out.value, n)

    def get(self, key):
        """Returns the value stored under key; b"" when missing or on error."""
        return self._get_rc(key)[1]

    def get_batch(self, keys):
        """Returns a list of values (b"" for the missing ones)."""
        return [self.get(k) for k in keys]

    def get_buffer(self, key):
        """The value of key in a BufferHandle (``ptr()``/``size()``), or None when missing."""
        rc, data = self._get_rc(key)
        return BufferHandle(data) if rc > 0 else None

    def batch_get_buffer(self, keys):
        """A BufferHandle (or None when missing) per key."""
        return [self.get_buffer(k) for k in keys]

    def get_into(self, key, buffer_ptr, size):
        """Reads the value of key into [buffer_ptr, +size). Bytes read, or negative
        (-704 missing, -600 when the buffer is too small)."""
        if not self._ready("get_into"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("get_into", self._lib.mc_store_get_into(self._h, _key(key), int(buffer_ptr) or None, int(size)),
                        quiet=(ErrorCode.OBJECT_NOT_FOUND,))

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        """Reads several values into memory ranges; a list of bytes read or negative codes."""
        if not self._ready("batch_get_into"):
            return [ErrorCode.INTERNAL_ERROR] * len(keys)
        n = len(keys)
        if not (n == len(buffer_ptrs) == len(sizes)):
            log.error("mooncake: batch_get_into: lists of different lengths")
            return [ErrorCode.INVALID_PARAMS] * n
        if n == 0:
            return []
        out = (ctypes.c_int64 * n)()
        rc = self._lib.mc_store_batch_get_into(self._h, n, _keys(keys), _native.ptr_array(buffer_ptrs),
                                               _native.u64_array(sizes), out)
        if rc < 0:
            self._rc("batch_get_into", rc)
            return [int(rc)] * n
        return [int(x) for x in out]

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets, all_sizes):
        """Copies byte ranges of several objects into registered buffers.

        For buffer i and its key j, range r copies all_sizes[i][j][r] bytes from offset
        all_src_offsets[i][j][r] of the object to offset all_dst_offsets[i][j][r] of
        buffer_ptrs[i] (which must be registered with register_buffer). Returns, nested
        the same way, the bytes copied per range or a negative code.
        """
        nb = len(buffer_ptrs)
        if not (nb == len(all_keys) == len(all_dst_offsets) == len(all_src_offsets) == len(all_sizes)):
            log.error("mooncake: get_into_ranges: lists of different lengths")
            return [[[ErrorCode.INVALID_PARAMS]] for _ in range(nb)]
        cache = {}
        out = []
        for i in range(nb):
            base = int(buffer_ptrs[i])
            cap = self._regs.get(base)
            keys = all_keys[i]
            per_buf = []
            for j, key in enumerate(keys):
                try:
                    dst, src, sz = all_dst_offsets[i][j], all_src_offsets[i][j], all_sizes[i][j]
                except IndexError:
                    per_buf.append([ErrorCode.INVALID_PARAMS])
                    continue
                if not (len(dst) == len(src) == len(sz)):
                    log.error("mooncake: get_into_ranges: key %r: offsets and sizes of different lengths", key)
                    per_buf.append([ErrorCode.INVALID_PARAMS])
                    continue
                if not dst:
                    per_buf.append([])
                    continue
                if cap is None:
                    log.error("mooncake: get_into_ranges: buffer 0x%x is not registered", base)
                    per_buf.append([ErrorCode.INVALID_PARAMS] * len(dst))
                    continue
                if key not in cache:
                    cache[key] = self._get_rc(key)
                rc, value = cache[key]
                res = []
                for d, s, n in zip(dst, src, sz):
                    d, s, n = int(d), int(s), int(n)
                    if rc < 0:
                        res.append(rc)
                    elif d < 0 or s < 0 or n < 0 or s + n > len(value) or d + n > cap:
                        res.append(ErrorCode.INVALID_PARAMS)
                    else:
                        if n:
                            ctypes.memmove(base + d, value[s:s + n], n)
                        res.append(n)
                per_buf.append(res)
            out.append(per_buf)
        return out

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, prefer_alloc_in_same_node=False):
        """Reads each key's value and scatters it over several memory ranges, in order.
        One result per key: bytes read, or a negative code (-600 when the ranges are too small)."""
        def one(key, ptrs, sizes):
            size = self.get_size(key)
            if size < 0:
                return size
            if size > sum(int(n) for n in sizes):
                return ErrorCode.INVALID_PARAMS
            rc, value = self._get_rc(key)
            if rc < 0 or len(value) != size:
                return rc if rc < 0 else ErrorCode.INTERNAL_ERROR
            off = 0
            for p, n in zip(ptrs, sizes):
                k = min(int(n), size - off)
                if k <= 0:
                    break
                ctypes.memmove(int(p), value[off:off + k], k)
                off += k
            return size
        return self._per_key_ranges("batch_get_into_multi_buffers", keys, all_buffer_ptrs, all_sizes, one)

    def register_buffer(self, buffer_ptr, size):
        """Registers memory used by put_from/get_into. 0 or negative."""
        if not self._ready("register_buffer"):
            return ErrorCode.INTERNAL_ERROR
        rc = self._rc("register_buffer", self._lib.mc_store_register_buffer(self._h, int(buffer_ptr) or None,
                                                                            int(size)))
        if rc == 0:
            self._regs[int(buffer_ptr)] = int(size)
        return rc

    def unregister_buffer(self, buffer_ptr):
        """Unregisters memory from register_buffer. 0 or negative."""
        if not self._ready("unregister_buffer"):
            return ErrorCode.INTERNAL_ERROR
        rc = self._rc("unregister_buffer", self._lib.mc_store_unregister_buffer(self._h, int(buffer_ptr) or None))
        if rc == 0:
            self._regs.pop(int(buffer_ptr), None)
        return rc

    # --- queries and removal --------------------------------------------

    def is_exist(self, key):
        """1 when key exists, 0 when not, -1 on error."""
        if not self._ready("is_exist"):
            return -1
        rc = self._lib.mc_store_exist(self._h, _key(key))
        if rc < 0:
            self._rc("is_exist", rc)
            return -1
        return 1 if rc > 0 else 0

    def batch_is_exist(self, keys):
        """A list of 1/0/-1, in the order of keys."""
        if not self._ready("batch_is_exist"):
            return [-1] * len(keys)
        n = len(keys)
        if n == 0:
            return []
        out = (ctypes.c_int64 * n)()
        rc = self._lib.mc_store_batch_exist(self._h, n, _keys(keys), out)
        if rc < 0:
            self._rc("batch_is_exist", rc)
            return [-1] * n
        return [1 if x > 0 else (0 if x == 0 else -1) for x in out]

    def get_size(self, key):
        """The size of the value of key, or a negative code (-704 when missing)."""
        if not self._ready("get_size"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("get_size", self._lib.mc_store_get_size(self._h, _key(key)),
                        quiet=(ErrorCode.OBJECT_NOT_FOUND,))

    def get_replica_desc(self, key):
        """The replicas of key (a list of ReplicaDescriptor; empty when missing or on error): memory
        replicas, then copies on disk tiers (``is_local_disk_replica()``)."""
        if not self._ready("get_replica_desc"):
            return []
        out = ctypes.c_void_p()
        n = self._lib.mc_store_stat(self._h, _key(key), ctypes.byref(out))
        if n < 0:
            self._rc("get_replica_desc", n, quiet=(ErrorCode.OBJECT_NOT_FOUND,))
            return []
        info = json.loads(_native.take_bytes(out.value, n) or b"{}")
        reps = []
        for r in info.get("replicas") or []:
            d = Descriptor(size=int(r.get("size", 0)), buffer_address=int(r.get("addr", 0)),
                           transport_endpoint=r.get("endpoint") or r.get("segment", ""))
            reps.append(ReplicaDescriptor(ReplicaStatus.COMPLETE, memory=MemoryDescriptor(d)))
        for r in info.get("disk") or []:  # a copy on a disk tier: Mooncake's LOCAL_DISK replica
            k = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            dd = DiskDescriptor(file_path="%s/disk/object?key=%s&seq=%d" % (r.get("url", ""), urllib.parse.quote(k, safe=""),
                                                                            int(r.get("seq", 0))),
                                object_size=int(info.get("size", 0)))
            reps.append(ReplicaDescriptor(ReplicaStatus.COMPLETE, disk=dd, local_disk=True))
        return reps

    def batch_get_replica_desc(self, keys):
        """A dict key -> list of ReplicaDescriptor (keys that are missing are left out)."""
        out = {}
        for k in keys:
            reps = self.get_replica_desc(k)
            if reps:
                out[k] = reps
        return out

    def remove(self, key, force=False):
        """Removes key. 0, or negative (-704 missing, -706 leased and not forced)."""
        if not self._ready("remove"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("remove", self._lib.mc_store_remove(self._h, _key(key), 1 if force else 0),
                        quiet=(ErrorCode.OBJECT_NOT_FOUND,))

    def batch_remove(self, keys, force=False):
        """Removes several keys; one code per key (0 or negative)."""
        n = len(keys)
        if not self._ready("batch_remove"):
            return [ErrorCode.INTERNAL_ERROR] * n
        if n == 0:
            return []
        out = (ctypes.c_int64 * n)()
        rc = self._lib.mc_store_batch_remove(self._h, n, _keys(keys), 1 if force else 0, out)
        if rc < 0:
            self._rc("batch_remove", rc)
            return [int(rc)] * n
        return [int(x) for x in out]

    def remove_by_regex(self, regex_pattern, force=False):
        """Removes the keys matching a regular expression; the count removed or negative."""
        if not self._ready("remove_by_regex"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("remove_by_regex", self._lib.mc_store_remove_regex(self._h, _key(regex_pattern),
                                                                           1 if force else 0))

    def remove_all(self, force=False):
        """Removes every object; the count removed or negative."""
        if not self._ready("remove_all"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("remove_all", self._lib.mc_store_remove_all(self._h, 1 if force else 0))

    def list(self, prefix=""):
        """The keys that start with prefix, sorted (not in Mooncake's class; ours adds it)."""
        if not self._ready("list"):
            return []
        out = ctypes.c_void_p()
        n = self._lib.mc_store_list(self._h, _key(prefix), ctypes.byref(out))
        if n < 0:
            self._rc("list", n)
            return []
        raw = _native.take_bytes(out.value, n)
        return sorted(json.loads(raw)) if raw else []

    # --- extra segments, SSD offload counters, put/get sessions (docs/python.md) ---

    def mount_segment(self, path, size, offset=0, protocol="tcp", location=""):
        """Maps size bytes of the file at path (from offset, a multiple of the page size) and
        contributes them as one more segment of this client. {"ret": 0, "segment_ids": [id]};
        {"ret": -1, "segment_ids": []} on failure (Mooncake's values)."""
        fail = {"ret": -1, "segment_ids": []}
        if not self._ready("mount_segment"):
            return fail
        out = ctypes.c_void_p()
        n = self._lib.mc_store_mount_segment(self._h, _native.cstr(str(path)), int(offset), int(size),
                                             ctypes.byref(out))
        if n < 0:
            self._rc("mount_segment", n)
            return fail
        return {"ret": 0, "segment_ids": json.loads(_native.take_bytes(out.value, n) or b"[]")}

    def allocate_and_mount_segment(self, size, protocol="tcp", location=""):
        """Allocates size bytes (rounded up to 4 MiB, Mooncake's slab) and contributes them as one
        more segment. {"ret": 0, "segment_ids": [id], "allocated_size": n}, or ret -1."""
        fail = {"ret": -1, "segment_ids": [], "allocated_size": 0}
        if not self._ready("allocate_and_mount_segment"):
            return fail
        out = ctypes.c_void_p()
        allocated = ctypes.c_uint64()
        n = self._lib.mc_store_allocate_segment(self._h, int(size), ctypes.byref(allocated), ctypes.byref(out))
        if n < 0:
            self._rc("allocate_and_mount_segment", n)
            return fail
        return {"ret": 0, "segment_ids": json.loads(_native.take_bytes(out.value, n) or b"[]"),
                "allocated_size": int(allocated.value)}

    def _unmount(self, what, segment_ids, grace_period_seconds):
        if not self._ready(what):
            return -1
        if isinstance(segment_ids, (str, bytes)):
            segment_ids = [segment_ids]
        ids = [s.decode() if isinstance(s, bytes) else str(s) for s in segment_ids]
        rc = self._lib.mc_store_unmount_segments(self._h, _native.cstr(json.dumps(ids)),
                                                 int(grace_period_seconds) * 1000)
        if rc < 0:
            self._rc(what, rc)
            return -1
        return 0

    def unmount_segment(self, segment_ids, grace_period_seconds=0):
        """Unmounts segments of mount_segment (waiting up to grace_period_seconds for readers)
        and unmaps them. 0, or -1 when an id is unknown (the others are still unmounted)."""
        return self._unmount("unmount_segment", segment_ids, grace_period_seconds)

    def unmount_and_free_segment(self, segment_ids, grace_period_seconds=0):
        """Unmounts segments of allocate_and_mount_segment and frees their memory. 0 or -1."""
        return self._unmount("unmount_and_free_segment", segment_ids, grace_period_seconds)

    def unmount_local_disk_segment(self, grace_period_seconds=0):
        return self._unsupported("unmount_local_disk_segment",
                                 "draining the disk tier is not supported (disk copies stay readable until "
                                 "the client closes)", ErrorCode.NOT_SUPPORTED)

    def get_offload_rpc_read_count(self):
        """How many values this client has read from disk tiers (Mooncake's offload RPC reads)."""
        if not self._h:
            return 0
        return max(0, int(self._lib.mc_store_disk_reads(self._h)))

    # Put and get sessions are kept by this object: a put session stages each value in
    # process memory until batch_put_session_end puts it (so the key is invisible until then,
    # as in Mooncake); a get session reads each value once at its start and serves ranged
    # reads from that copy until batch_get_session_end.

    def _sessions(self):
        with self._lock:
            if not hasattr(self, "_put_sessions"):
                self._put_sessions, self._get_sessions = {}, {}
            return self._put_sessions, self._get_sessions

    def batch_put_session_start(self, keys, sizes, config=None):
        """Reserves keys of these sizes for ranged writes. Per key: 0, -600 (size 0 or a
        session already open), -705 (the key exists)."""
        n = len(keys)
        if not self._ready("batch_put_session_start"):
            return []
        if len(sizes) != n:
            log.error("mooncake: batch_put_session_start: %d keys, %d sizes", n, len(sizes))
            return [ErrorCode.INVALID_PARAMS] * n
        puts, _ = self._sessions()
        exist = self.batch_is_exist(list(keys)) if n else []
        out = []
        for key, size, e in zip(keys, sizes, exist):
            k = _key(key)
            size = int(size)
            with self._lock:
                busy = k in puts
            if size <= 0 or busy or not k:  # an empty object cannot be put, as in Mooncake
                out.append(ErrorCode.INVALID_PARAMS)
            elif e == 1:
                out.append(ErrorCode.OBJECT_ALREADY_EXISTS)
            elif e < 0:
                out.append(ErrorCode.RPC_FAIL)
            else:
                with self._lock:
                    puts[k] = (bytearray(size), config)
                out.append(0)
        return out

    def batch_put_from_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes, all_dst_offsets):
        """Copies ranges of buffers into each key's put session (at all_dst_offsets). Per key:
        the bytes written, or -600 (no session, lists of different lengths, range outside)."""
        n = len(keys)
        if not self._ready("batch_put_from_multi_buffer_ranges"):
            return []
        if not (len(all_buffer_ptrs) == len(all_sizes) == len(all_dst_offsets) == n):
            return [ErrorCode.INVALID_PARAMS] * n
        puts, _ = self._sessions()
        out = []
        for key, ptrs, sizes, offs in zip(keys, all_buffer_ptrs, all_sizes, all_dst_offsets):
            with self._lock:
                sess = puts.get(_key(key))
            if sess is None or not (len(ptrs) == len(sizes) == len(offs)):
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            buf = sess[0]
            if any(int(o) < 0 or int(z) < 0 or int(o) + int(z) > len(buf) or (int(z) and not int(p))
                   for p, z, o in zip(ptrs, sizes, offs)):
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            base = ctypes.addressof((ctypes.c_char * max(1, len(buf))).from_buffer(buf)) if len(buf) else 0
            total = 0
            for p, z, o in zip(ptrs, sizes, offs):
                if int(z):
                    ctypes.memmove(base + int(o), int(p), int(z))
                total += int(z)
            out.append(total)
        return out

    def batch_put_session_end(self, keys):
        """Puts every staged value (its key becomes readable). Per key: 0, -600 (no session), or
        the put's code (the session stays open on failure, to retry or revoke)."""
        if not self._ready("batch_put_session_end"):
            return []
        puts, _ = self._sessions()
        out = []
        for key in keys:
            k = _key(key)
            with self._lock:
                sess = puts.get(k)
            if sess is None:
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            rc = self.put(k, sess[0], sess[1])
            if rc == 0:
                with self._lock:
                    puts.pop(k, None)
            out.append(rc)
        return out

    def batch_put_session_revoke(self, keys):
        """Drops put sessions without storing. Per key: 0, -600 (no session)."""
        if not self._ready("batch_put_session_revoke"):
            return []
        puts, _ = self._sessions()
        out = []
        with self._lock:
            for key in keys:
                out.append(0 if puts.pop(_key(key), None) is not None else ErrorCode.INVALID_PARAMS)
        return out

    def batch_get_session_start(self, keys):
        """Reads each value once for ranged reads. Per key: 0, -704 (missing), or a code."""
        if not self._ready("batch_get_session_start"):
            return []
        _, gets = self._sessions()
        out = []
        for key in keys:
            k = _key(key)
            size = self.get_size(k)
            if size < 0:
                with self._lock:
                    gets.pop(k, None)
                out.append(int(size))
                continue
            buf = bytearray(size)
            got = self.get_into(k, ctypes.addressof((ctypes.c_char * max(1, size)).from_buffer(buf)), size) \
                if size else 0
            if got < 0 or got != size:
                with self._lock:
                    gets.pop(k, None)
                out.append(int(got) if got < 0 else ErrorCode.INVALID_REPLICA)
                continue
            with self._lock:
                gets[k] = buf
            out.append(0)
        return out

    def batch_get_into_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes, all_src_offsets):
        """Copies ranges (from all_src_offsets) of each session's value into buffers. Per key: the
        bytes copied, or -600 (no session, lists of different lengths, a range outside). The
        session holds a copy, so it does not expire with the read lease as Mooncake's does
        (-707 there)."""
        n = len(keys)
        if not self._ready("batch_get_into_multi_buffer_ranges"):
            return []
        if not (len(all_buffer_ptrs) == len(all_sizes) == len(all_src_offsets) == n):
            return [ErrorCode.INVALID_PARAMS] * n
        _, gets = self._sessions()
        out = []
        for key, ptrs, sizes, offs in zip(keys, all_buffer_ptrs, all_sizes, all_src_offsets):
            with self._lock:
                buf = gets.get(_key(key))
            if buf is None:
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            if not (len(ptrs) == len(sizes) == len(offs)) or any(
                    int(o) < 0 or int(z) < 0 or int(o) + int(z) > len(buf) or (int(z) and not int(p))
                    for p, z, o in zip(ptrs, sizes, offs)):
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            base = ctypes.addressof((ctypes.c_char * max(1, len(buf))).from_buffer(buf)) if len(buf) else 0
            total = 0
            for p, z, o in zip(ptrs, sizes, offs):
                if int(z):
                    ctypes.memmove(int(p), base + int(o), int(z))
                total += int(z)
            out.append(total)
        return out

    def batch_get_session_end(self, keys):
        """Ends get sessions (drops the copies). 0 (-1 when not set up)."""
        if not self._ready("batch_get_session_end"):
            return -1
        _, gets = self._sessions()
        with self._lock:
            for key in keys:
                gets.pop(_key(key), None)
        return 0

    # --- replica clear and copy/move tasks (the master's MasterTasks service) ---

    def batch_replica_clear(self, keys, segment_name=""):
        """Clears the replicas of keys this client put: every copy with segment_name "" (the
        objects are removed), else only the copies on that segment (an object left without a
        copy is removed). Returns the keys cleared; keys that are missing, put by another
        client, unfinished or in use (a read lease, or written, read or checked within the
        master's lease TTL) are skipped. [] when not set up or on error."""
        if not self._ready("batch_replica_clear"):
            return []
        keys = [k.decode("utf-8") if isinstance(k, bytes) else str(k) for k in keys]
        if not keys:
            return []
        out = ctypes.c_void_p()
        n = self._lib.mc_store_replica_clear(self._h, len(keys), _keys(keys), _key(segment_name or ""),
                                                    ctypes.byref(out))
        if n < 0:
            self._rc("batch_replica_clear", n)
            return []
        raw = _native.take_bytes(out.value, n)
        return [str(k) for k in json.loads(raw)] if raw else []

    def create_copy_task(self, key, targets):
        """Asks the master for a replica of key on each target segment. Returns (task id, 0),
        or (UUID(0, 0), negative code): -704 no such key, -600 no target or one not mounted,
        -1010 a target being unmounted, -1401 too many pending tasks. The copy runs in the
        background on the client holding the source replica; follow it with query_task."""
        if not self._ready("create_copy_task"):
            return UUID(0, 0), ErrorCode.INVALID_PARAMS
        targets = [str(t) for t in targets]
        tid = (ctypes.c_uint64 * 2)()
        rc = self._lib.mc_store_create_copy_task(self._h, _key(key), len(targets), _keys(targets), tid)
        if rc < 0:
            return UUID(0, 0), self._rc("create_copy_task", rc)
        return UUID(tid[0], tid[1]), 0

    def create_move_task(self, key, source, target):
        """Asks the master to move key's replica on segment source to segment target. Returns
        (task id, 0), or (UUID(0, 0), negative code) as create_copy_task (-600 also when
        source == target or source holds no replica of key)."""
        if not self._ready("create_move_task"):
            return UUID(0, 0), ErrorCode.INVALID_PARAMS
        tid = (ctypes.c_uint64 * 2)()
        rc = self._lib.mc_store_create_move_task(self._h, _key(key), _key(source), _key(target), tid)
        if rc < 0:
            return UUID(0, 0), self._rc("create_move_task", rc)
        return UUID(tid[0], tid[1]), 0

    def query_task(self, task_id):
        """The state of a copy/move task: (QueryTaskResponse, 0), or (None, negative code):
        -1400 for an unknown task. The status goes PENDING -> PROCESSING -> SUCCESS or FAILED
        (the reason in message); assigned_client is the id of the client executing it."""
        try:
            hi, lo = task_id
            hi, lo = int(hi), int(lo)
        except (TypeError, ValueError):
            raise TypeError("query_task(): incompatible task_id %r (a (int, int) UUID is required)" % (task_id,))
        if not (0 <= hi < 1 << 64 and 0 <= lo < 1 << 64):
            raise TypeError("query_task(): task_id halves must be unsigned 64-bit ints")
        if not self._ready("query_task"):
            return None, ErrorCode.INVALID_PARAMS
        out = ctypes.c_void_p()
        n = self._lib.mc_store_query_task(self._h, hi, lo, ctypes.byref(out))
        if n < 0:
            return None, self._rc("query_task", n)
        t = json.loads(_native.take_bytes(out.value, n) or b"{}")
        return QueryTaskResponse(id=UUID(t.get("hi", hi), t.get("lo", lo)), type=TaskType(int(t.get("type", 0))),
                                 status=TaskStatus(int(t.get("status", 0))),
                                 created_at_ms_epoch=int(t.get("created_ms", 0)),
                                 last_updated_at_ms_epoch=int(t.get("updated_ms", 0)),
                                 assigned_client=t.get("client", ""), message=t.get("message", "")), 0

    def _get_pyclient_capsule(self):
        return None


def _serialize_tensor(tensor):
    """Mooncake's tensor header of a CPU torch tensor (or numpy array) and its data:
    (header bytes, data address, data size, owner keeping the data alive)."""
    try:
        ins = _tensor.inspect(tensor)
    except _tensor.TensorError as e:
        raise RuntimeError("unsupported tensor for Mooncake tensor serialization: %s" % e)
    ins.header.data_bytes = ins.nbytes
    return (ins.header.pack(), ins.ptr, ins.nbytes, ins.owner)


def _tensor_metadata_size():
    """The size of Mooncake's tensor header (304)."""
    return _tensor.HEADER_SIZE


def _deserialize_tensor(payload):
    """The tensor in a header-plus-data payload; ValueError when it is not one."""
    try:
        return _tensor.decode(bytearray(payload))
    except _tensor.TensorError as e:
        raise ValueError("invalid serialized Mooncake tensor payload: %s" % e)



class MooncakeHostMemAllocator(object):
    """Page-aligned host memory (Mooncake's allocator for store buffers): ``alloc``/``free``."""

    def __init__(self):
        self._libc = ctypes.CDLL(None)
        self._libc.aligned_alloc.restype = ctypes.c_void_p
        self._libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
        self._libc.free.argtypes = [ctypes.c_void_p]

    def alloc(self, size):
        """The address of size bytes (0 on failure)."""
        size = int(size)
        if size <= 0:
            return 0
        return int(self._libc.aligned_alloc(4096, (size + 4095) // 4096 * 4096) or 0)

    def free(self, ptr):
        """Frees memory from alloc. 0."""
        if ptr:
            self._libc.free(ctypes.c_void_p(int(ptr)))
        return 0


class MooncakeDistributedNoFRegister(object):
    """NVMe-over-Fabrics segment registration: not supported here (each call returns -1)."""

    def real_register(self, nqn="", nsid=1, traddr="", trsvcid=4420, base=0, size=1024,
                      master_server_addr="127.0.0.1:50051"):
        log.error("mooncake: real_register: NVMe-oF segments are not supported")
        return -1

    def real_unregister_by_endpoint(self, nqn="", nsid=1, traddr="", trsvcid=4420,
                                    master_server_addr="127.0.0.1:50051"):
        log.error("mooncake: real_unregister_by_endpoint: NVMe-oF segments are not supported")
        return -1


def bind_to_numa_node(node):
    """Mooncake binds the calling thread to a NUMA node; here it only warns (no libnuma)."""
    log.warning("mooncake: bind_to_numa_node(%s): NUMA binding is not available; skipped", node)


def get_alloc_func_addr():
    """The address of the C allocator used for store buffers (libc malloc here)."""
    return ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value or 0


def get_free_func_addr():
    """The address of the matching free function."""
    return ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p).value or 0


def _get_pyclient_from_wrapper(wrapper):
    return None


from ._buffer_pool import (BufferLease, BufferLeaseView, BufferPool, RegisteredBufferLease,  # noqa: E402
                           RegisteredBufferLeaseView, RegisteredBufferPool)  # (needs MooncakeDistributedStore's module)
