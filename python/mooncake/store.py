"""mooncake.store: a drop-in for Mooncake's ``MooncakeDistributedStore`` Python class.

Backed by the Go store client through libmooncake.so (see ``_native``).
Return conventions are Mooncake's:

* ``put``/``put_from``/``put_batch``/``remove``/``register_buffer``/... return
  ``0`` or a negative Mooncake error code (``-704`` object not found,
  ``-706`` object has a lease, ``-800`` transfer failed, ``-900`` RPC failed, ...);
* ``get`` returns the value, ``b""`` when it is missing or on error;
* ``get_into`` returns the number of bytes read, or a negative code;
* ``is_exist`` returns ``1``, ``0`` or ``-1``; ``get_size`` a size or a negative code;
* ``remove_by_regex``/``remove_all`` return the number removed or a negative code.

A failure never raises out of the native library: the reason is logged
(logger ``mooncake`` and the library's stderr log).

``setup()`` takes Mooncake's positional arguments; any left out (or ``None``)
come from ``MOONCAKE_CONFIG_PATH`` or the ``MOONCAKE_*`` environment (see
``mooncake.config``).
"""

import ctypes
import json
import logging

from . import _native
from .config import MooncakeConfig, parse_size

log = logging.getLogger("mooncake")

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "ErrorCode", "BufferHandle"]


class ErrorCode(object):
    """Mooncake store error codes (negative ints)."""

    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SEGMENT_NOT_FOUND = -101
    NO_AVAILABLE_HANDLE = -200
    INVALID_PARAMS = -600
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    LEASE_EXPIRED = -707
    TRANSFER_FAIL = -800
    RPC_FAIL = -900
    RPC_TIMEOUT = -901


class ReplicateConfig(object):
    """Placement options of a put (Mooncake's ``ReplicateConfig``)."""

    def __init__(self, replica_num=1, with_soft_pin=False, with_hard_pin=False, preferred_segment="",
                 preferred_segments=None, prefer_alloc_in_same_node=False):
        self.replica_num = replica_num
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segment = preferred_segment
        self.preferred_segments = list(preferred_segments or [])
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node

    def __repr__(self):
        return "ReplicateConfig(replica_num=%d, with_soft_pin=%s, with_hard_pin=%s, preferred_segments=%r)" % (
            self.replica_num, self.with_soft_pin, self.with_hard_pin, self._segments())

    def _segments(self):
        segs = list(self.preferred_segments)
        if self.preferred_segment and self.preferred_segment not in segs:
            segs.insert(0, self.preferred_segment)
        return segs

    def to_json(self):
        return json.dumps({
            "replica_num": int(self.replica_num),
            "with_soft_pin": bool(self.with_soft_pin),
            "with_hard_pin": bool(self.with_hard_pin),
            "preferred_segments": self._segments(),
            "prefer_alloc_in_same_node": bool(self.prefer_alloc_in_same_node),
        })


def _cfg(config):
    if config is None:
        return b""
    if not isinstance(config, ReplicateConfig):
        raise TypeError("config must be a mooncake.store.ReplicateConfig")
    return config.to_json().encode()


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


class BufferHandle(object):
    """A value held in memory owned by this process (Mooncake's ``get_buffer`` result)."""

    def __init__(self, data):
        self._buf = ctypes.create_string_buffer(data, len(data)) if data else None
        self._n = len(data)

    def ptr(self):
        """Address of the first byte (0 for an empty value)."""
        return ctypes.addressof(self._buf) if self._buf is not None else 0

    def size(self):
        return self._n

    def __len__(self):
        return self._n

    def tobytes(self):
        return self._buf.raw[:self._n] if self._buf is not None else b""


class MooncakeDistributedStore(object):
    """Client of a Mooncake store cluster (a master plus storage nodes)."""

    def __init__(self):
        self._lib = _native.lib()
        self._h = 0
        self.config = None

    # --- lifecycle -------------------------------------------------------

    def setup(self, local_hostname=None, metadata_server=None, global_segment_size=None, local_buffer_size=None,
              protocol=None, rdma_devices=None, master_server_addr=None, engine=None):
        """Connects to the master and, when global_segment_size > 0, contributes that much memory.

        Arguments left out come from MOONCAKE_CONFIG_PATH / MOONCAKE_* (mooncake.config).
        Returns 0, or a negative code.
        """
        if self._h:
            log.error("mooncake: setup: store already set up")
            return ErrorCode.INVALID_PARAMS
        try:
            cfg = MooncakeConfig.load_from_env()
            if local_hostname is not None:
                cfg.local_hostname = str(local_hostname)
            if metadata_server is not None:
                cfg.metadata_server = str(metadata_server)
            if global_segment_size is not None:
                cfg.global_segment_size = parse_size(global_segment_size)
            if local_buffer_size is not None:
                cfg.local_buffer_size = parse_size(local_buffer_size)
            if protocol is not None:
                cfg.protocol = str(protocol)
            if rdma_devices is not None:
                cfg.device_name = str(rdma_devices)
            if master_server_addr is not None:
                cfg.master_server_address = str(master_server_addr)
        except (ValueError, OSError) as exc:
            log.error("mooncake: setup: bad configuration: %s", exc)
            return ErrorCode.INVALID_PARAMS
        if engine is not None:
            log.warning("mooncake: setup: sharing a TransferEngine is not supported; the store uses its own")
        h = self._lib.mc_store_open(_native.cstr(cfg.local_hostname), _native.cstr(cfg.metadata_server),
                                    cfg.global_segment_size, cfg.local_buffer_size, _native.cstr(cfg.protocol),
                                    _native.cstr(cfg.device_name), _native.cstr(cfg.master_server_address))
        if h <= 0:
            log.error("mooncake: setup: %s", _native.last_error())
            return int(h) if h < 0 else ErrorCode.INTERNAL_ERROR
        self._h = h
        self.config = cfg
        return 0

    def init_all(self, protocol, device_name, mount_segment_size=16 * 1024 * 1024):
        """Mooncake's older entry point: setup from the environment with these overrides."""
        return self.setup(protocol=protocol, rdma_devices=device_name, global_segment_size=mount_segment_size)

    def close(self):
        """Unmounts this client's segment and disconnects. Returns 0."""
        h, self._h = self._h, 0
        if not h:
            return 0
        rc = self._lib.mc_store_close(h)
        if rc < 0:
            log.error("mooncake: close: %s", _native.last_error())
            return int(rc)
        return 0

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

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

    def health_check(self):
        """0 when the master answers, else a negative code."""
        if not self._ready("health_check"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("health_check", self._lib.mc_store_health(self._h))

    # --- put / get -------------------------------------------------------

    def put(self, key, value, config=None):
        """Stores value (bytes-like) under key. A key that exists is left as is. 0 or negative."""
        if not self._ready("put"):
            return ErrorCode.INTERNAL_ERROR
        keep, ptr, n = _buffer_ptr(value)
        rc = self._lib.mc_store_put(self._h, _key(key), ptr or None, n, _cfg(config))
        del keep
        return self._rc("put", rc)

    def put_from(self, key, buffer_ptr, size, config=None):
        """Stores [buffer_ptr, +size) of process memory under key. 0 or negative."""
        if not self._ready("put_from"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("put_from", self._lib.mc_store_put(self._h, _key(key), int(buffer_ptr) or None, int(size),
                                                           _cfg(config)))

    def put_parts(self, key, *parts, **kw):
        """Stores the concatenation of several bytes-like parts. 0 or negative."""
        return self.put(key, b"".join(bytes(memoryview(p)) for p in parts), kw.get("config"))

    def put_batch(self, keys, values, config=None):
        """Stores several values. 0 when all succeeded, else the first negative code."""
        if not self._ready("put_batch"):
            return ErrorCode.INTERNAL_ERROR
        if len(keys) != len(values):
            log.error("mooncake: put_batch: %d keys but %d values", len(keys), len(values))
            return ErrorCode.INVALID_PARAMS
        if not keys:
            return 0
        bufs = [_buffer_ptr(v) for v in values]
        res = self._batch_put(keys, [b[1] for b in bufs], [b[2] for b in bufs], config)
        del bufs
        for rc in res:
            if rc < 0:
                return rc
        return 0

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        """Stores several memory ranges; a list with one code per key."""
        if not self._ready("batch_put_from"):
            return [ErrorCode.INTERNAL_ERROR] * len(keys)
        if not (len(keys) == len(buffer_ptrs) == len(sizes)):
            log.error("mooncake: batch_put_from: lists of different lengths")
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        if not keys:
            return []
        return self._batch_put(keys, buffer_ptrs, sizes, config)

    def _batch_put(self, keys, ptrs, sizes, config):
        n = len(keys)
        out = (ctypes.c_int64 * n)()
        rc = self._lib.mc_store_batch_put(self._h, n, _keys(keys), _native.ptr_array(ptrs),
                                          _native.u64_array(sizes), _cfg(config), out)
        if rc < 0:
            self._rc("batch_put", rc)
            return [int(rc)] * n
        res = [int(x) for x in out]
        if any(x < 0 for x in res):
            log.error("mooncake: batch_put: %s", _native.last_error())
        return res

    def get(self, key):
        """Returns the value stored under key; b"" when missing or on error."""
        if not self._ready("get"):
            return b""
        out = ctypes.c_void_p()
        n = self._lib.mc_store_get(self._h, _key(key), ctypes.byref(out))
        if n < 0:
            self._rc("get", n, quiet=(ErrorCode.OBJECT_NOT_FOUND,))
            return b""
        return _native.take_bytes(out.value, n)

    def get_buffer(self, key):
        """The value of key in a BufferHandle (``ptr()``/``size()``), or None when missing."""
        data = self.get(key)
        return BufferHandle(data) if data else None

    def get_batch(self, keys):
        """Returns a list of values (b"" for the missing ones)."""
        return [self.get(k) for k in keys]

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

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        """Stores, for each key, the concatenation of several memory ranges; one code per key."""
        if not (len(keys) == len(all_buffer_ptrs) == len(all_sizes)):
            log.error("mooncake: batch_put_from_multi_buffers: lists of different lengths")
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        out = []
        for key, ptrs, sizes in zip(keys, all_buffer_ptrs, all_sizes):
            if len(ptrs) != len(sizes) or any(int(p) == 0 for p in ptrs) or any(int(n) < 0 for n in sizes):
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            value = b"".join(ctypes.string_at(int(p), int(n)) for p, n in zip(ptrs, sizes))
            out.append(self.put(key, value, config))
        return out

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes):
        """Reads each key's value and scatters it over several memory ranges, in order.
        One result per key: bytes read, or a negative code (-600 when the ranges are too small)."""
        if not (len(keys) == len(all_buffer_ptrs) == len(all_sizes)):
            log.error("mooncake: batch_get_into_multi_buffers: lists of different lengths")
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        out = []
        for key, ptrs, sizes in zip(keys, all_buffer_ptrs, all_sizes):
            if len(ptrs) != len(sizes) or any(int(p) == 0 for p in ptrs) or any(int(n) < 0 for n in sizes):
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            size = self.get_size(key)
            if size < 0:
                out.append(size)
                continue
            if size > sum(int(n) for n in sizes):
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            value = self.get(key)
            if len(value) != size:
                out.append(ErrorCode.OBJECT_NOT_FOUND if not value else ErrorCode.INTERNAL_ERROR)
                continue
            off = 0
            for p, n in zip(ptrs, sizes):
                k = min(int(n), size - off)
                if k <= 0:
                    break
                ctypes.memmove(int(p), value[off:off + k], k)
                off += k
            out.append(size)
        return out

    def register_buffer(self, buffer_ptr, size):
        """Registers memory used by put_from/get_into. 0 or negative."""
        if not self._ready("register_buffer"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("register_buffer", self._lib.mc_store_register_buffer(self._h, int(buffer_ptr) or None, int(size)))

    def unregister_buffer(self, buffer_ptr):
        """Unregisters memory from register_buffer. 0 or negative."""
        if not self._ready("unregister_buffer"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("unregister_buffer", self._lib.mc_store_unregister_buffer(self._h, int(buffer_ptr) or None))

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

    def remove(self, key, force=False):
        """Removes key. 0, or negative (-704 missing, -706 leased and not forced)."""
        if not self._ready("remove"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("remove", self._lib.mc_store_remove(self._h, _key(key), 1 if force else 0),
                        quiet=(ErrorCode.OBJECT_NOT_FOUND,))

    def remove_by_regex(self, regex, force=False):
        """Removes the keys matching a regular expression; the count removed or negative."""
        if not self._ready("remove_by_regex"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("remove_by_regex", self._lib.mc_store_remove_regex(self._h, _key(regex),
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

    def get_hostname(self):
        """This client's local hostname."""
        return self.config.local_hostname if self.config else ""
