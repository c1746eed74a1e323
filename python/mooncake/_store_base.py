"""The core MooncakeDistributedStore's other parts build on: the handle, error
reporting and the registered buffers (``register_buffer``), and the helpers they
share (keys as C strings, values as addresses, ``ErrorCode``, ``BufferHandle``).
"""

import ctypes
import logging
import threading

from . import _native

log = logging.getLogger("mooncake")


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


class StoreBase(_native.Closable):
    """The native handle (0 before setup), its lock and the registered buffers."""

    def __init__(self):
        self._lib = _native.lib()
        self._h = 0
        self._lock = threading.Lock()
        self._regs = {}  # registered buffers: address -> size
        self.config = None

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

    def _first_error(self, res):
        for rc in res:
            if rc < 0:
                return rc
        return 0

    def _registered(self, ptr, n):
        for base, size in list(self._regs.items()):
            if base <= ptr and ptr + n <= base + size:
                return True
        return False

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
