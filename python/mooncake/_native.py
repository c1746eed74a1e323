"""Loader for libmooncake.so, the C ABI built from ./binding (Go, -buildmode=c-shared).

The library is looked up, in order:

1. ``$MOONCAKE_LIB`` (a path to the .so file),
2. ``<package dir>/_lib/libmooncake.so`` (where ``make python`` puts it).

Only the standard library (ctypes) is used. Every function returns a 64-bit
integer: zero or a positive value on success, a negative Mooncake error code on
failure. The reason for a failure is logged by the library on stderr and can be
read back with :func:`last_error`.
"""

import ctypes
import os
import threading

_c_i64 = ctypes.c_int64
_c_u64 = ctypes.c_uint64
_c_str = ctypes.c_char_p
_c_ptr = ctypes.c_void_p
_p_u64 = ctypes.POINTER(ctypes.c_uint64)
_p_i64 = ctypes.POINTER(ctypes.c_int64)

# name -> (restype, argtypes)
_PROTOTYPES = {
    "mc_last_error": (_c_i64, [ctypes.c_char_p, _c_i64]),
    "mc_free": (None, [_c_ptr]),
    # transfer engine
    "mc_engine_open": (_c_i64, [_c_str, _c_str, _c_str, _c_str]),
    "mc_engine_close": (_c_i64, [_c_i64]),
    "mc_engine_rpc_port": (_c_i64, [_c_i64]),
    "mc_engine_name": (_c_i64, [_c_i64, ctypes.c_char_p, _c_i64]),
    "mc_engine_register": (_c_i64, [_c_i64, _c_u64, _c_u64, _c_str]),
    "mc_engine_unregister": (_c_i64, [_c_i64, _c_u64]),
    "mc_engine_alloc_managed": (_c_u64, [_c_i64, _c_u64]),
    "mc_engine_free_managed": (_c_i64, [_c_i64, _c_u64]),
    "mc_engine_transfer": (_c_i64, [_c_i64, _c_str, _c_i64, _c_i64, _p_u64, _p_u64, _p_u64]),
    "mc_engine_submit": (_c_i64, [_c_i64, _c_str, _c_i64, _c_i64, _p_u64, _p_u64, _p_u64]),
    "mc_batch_wait": (_c_i64, [_c_i64, _c_i64, _p_i64]),
    "mc_batch_check": (_c_i64, [_c_i64, _c_i64]),
    "mc_engine_probe": (_c_i64, [_c_i64, _c_str]),
    "mc_engine_first_buffer": (_c_u64, [_c_i64, _c_str]),
    "mc_engine_notify": (_c_i64, [_c_i64, _c_str, _c_str, _c_ptr, _c_i64]),
    "mc_engine_notifies": (_c_i64, [_c_i64, ctypes.POINTER(_c_ptr)]),
    "mc_engine_topology": (_c_i64, [_c_i64, ctypes.POINTER(_c_ptr)]),
    # GPU memory (_cuda)
    "mc_cuda_supported": (_c_i64, []),
    "mc_cuda_device": (_c_i64, [_c_u64]),
    "mc_cuda_memcpy": (_c_i64, [_c_u64, _c_u64, _c_u64]),
    "mc_cuda_stream_sync": (_c_i64, [_c_i64, _c_u64]),
    "mc_cuda_alloc": (_c_u64, [_c_i64, _c_u64]),
    "mc_cuda_free": (_c_i64, [_c_i64, _c_u64]),
    # store client
    "mc_store_open_ex": (_c_i64, [_c_str, _c_str, _c_u64, _c_u64, _c_str, _c_str, _c_str, _c_str]),
    "mc_store_close": (_c_i64, [_c_i64]),
    "mc_store_open_dummy": (_c_i64, [_c_u64, _c_u64, _c_str]),
    "mc_store_alloc_from_pool": (_c_ptr, [_c_i64, _c_u64]),
    "mc_store_health": (_c_i64, [_c_i64]),
    "mc_store_get": (_c_i64, [_c_i64, _c_str, ctypes.POINTER(_c_ptr)]),
    "mc_store_get_into": (_c_i64, [_c_i64, _c_str, _c_ptr, _c_u64]),
    "mc_store_batch_get_into": (_c_i64, [_c_i64, _c_i64, ctypes.POINTER(_c_str), ctypes.POINTER(_c_ptr), _p_u64, _p_i64]),
    "mc_store_register_buffer": (_c_i64, [_c_i64, _c_ptr, _c_u64]),
    "mc_store_unregister_buffer": (_c_i64, [_c_i64, _c_ptr]),
    "mc_store_exist": (_c_i64, [_c_i64, _c_str]),
    "mc_store_batch_exist": (_c_i64, [_c_i64, _c_i64, ctypes.POINTER(_c_str), _p_i64]),
    "mc_store_get_size": (_c_i64, [_c_i64, _c_str]),
    "mc_store_remove": (_c_i64, [_c_i64, _c_str, _c_i64]),
    "mc_store_remove_regex": (_c_i64, [_c_i64, _c_str, _c_i64]),
    "mc_store_remove_all": (_c_i64, [_c_i64, _c_i64]),
    "mc_store_list": (_c_i64, [_c_i64, _c_str, ctypes.POINTER(_c_ptr)]),
    "mc_store_put_ex": (_c_i64, [_c_i64, _c_str, _c_ptr, _c_u64, _c_str]),
    "mc_store_batch_put_ex": (_c_i64, [_c_i64, _c_i64, ctypes.POINTER(_c_str), ctypes.POINTER(_c_ptr), _p_u64, _c_str,
                                       _p_i64]),
    "mc_store_batch_remove": (_c_i64, [_c_i64, _c_i64, ctypes.POINTER(_c_str), _c_i64, _p_i64]),
    "mc_store_stat": (_c_i64, [_c_i64, _c_str, ctypes.POINTER(_c_ptr)]),
    "mc_store_hostname": (_c_i64, [_c_i64, ctypes.c_char_p, _c_i64]),
    "mc_store_disk_reads": (_c_i64, [_c_i64]),
    "mc_store_mount_segment": (_c_i64, [_c_i64, _c_str, _c_u64, _c_u64, ctypes.POINTER(_c_ptr)]),
    "mc_store_allocate_segment": (_c_i64, [_c_i64, _c_u64, _p_u64, ctypes.POINTER(_c_ptr)]),
    "mc_store_unmount_segments": (_c_i64, [_c_i64, _c_str, _c_i64]),
    # replica clear and copy/move tasks
    "mc_store_replica_clear": (_c_i64, [_c_i64, _c_i64, ctypes.POINTER(_c_str), _c_str, ctypes.POINTER(_c_ptr)]),
    "mc_store_create_copy_task": (_c_i64, [_c_i64, _c_str, _c_i64, ctypes.POINTER(_c_str), _p_u64]),
    "mc_store_create_move_task": (_c_i64, [_c_i64, _c_str, _c_str, _c_str, _p_u64]),
    "mc_store_query_task": (_c_i64, [_c_i64, _c_u64, _c_u64, ctypes.POINTER(_c_ptr)]),
    # engine RPC interface (_rpc) and fast copy (_fast_copy)
    "mc_rpc_server_open": (_c_i64, [_c_str, _c_i64]),
    "mc_rpc_server_port": (_c_i64, [_c_i64]),
    "mc_rpc_server_close": (_c_i64, [_c_i64]),
    "mc_rpc_recv": (_c_i64, [_c_i64, _c_i64, ctypes.POINTER(_c_ptr)]),
    "mc_rpc_client_open": (_c_i64, [_c_i64, _c_i64]),
    "mc_rpc_client_close": (_c_i64, [_c_i64]),
    "mc_rpc_send": (_c_i64, [_c_i64, _c_str, _c_i64, _c_ptr, _c_u64]),
    "mc_store_get_ranges": (_c_i64, [_c_i64, _c_str, _c_i64, _p_u64, ctypes.POINTER(_c_ptr), _p_u64]),
    "mc_engine_segment": (_c_i64, [_c_i64, _c_str, ctypes.POINTER(_c_ptr)]),
    "mc_gather_copy": (_c_i64, [_c_ptr, _c_u64, _c_i64, ctypes.POINTER(_c_ptr), _p_u64, _c_i64]),
}

_lock = threading.Lock()
_lib = None
_load_error = None


def library_path():
    """Returns the path the library is loaded from (it may not exist yet)."""
    env = os.environ.get("MOONCAKE_LIB")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "libmooncake.so")


def lib():
    """Returns the loaded library, loading it on first use.

    Raises ImportError (with the path tried) when the library cannot be loaded:
    build it with ``make python`` or point ``MOONCAKE_LIB`` at it.
    """
    global _lib, _load_error
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = library_path()
        try:
            handle = ctypes.CDLL(path)
        except OSError as exc:
            _load_error = exc
            raise ImportError(
                "mooncake: cannot load %s (%s); run `make python` or set MOONCAKE_LIB" % (path, exc)
            ) from exc
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(handle, name, None)
            if fn is None:
                continue  # a missing symbol fails only when it is called
            fn.restype = restype
            fn.argtypes = argtypes
        _lib = handle
        return _lib


def has(name):
    """Reports whether the loaded library exports the function name."""
    return getattr(lib(), name, None) is not None


def last_error():
    """Returns the reason of the most recent failure in the library ("" if none)."""
    buf = ctypes.create_string_buffer(1024)
    n = lib().mc_last_error(buf, len(buf))
    return buf.value[: max(0, min(n, len(buf) - 1))].decode("utf-8", "replace")


def cstr(s):
    """Encodes a str (or bytes, or None) for a char* argument."""
    if s is None:
        return b""
    if isinstance(s, bytes):
        return s
    return str(s).encode("utf-8")


def u64_array(values):
    """Builds a C uint64 array from a sequence of ints."""
    n = len(values)
    try:
        return (ctypes.c_uint64 * n)(*values)  # one C-level call on the hot path
    except TypeError:
        pass
    arr = (ctypes.c_uint64 * n)()
    for i, v in enumerate(values):
        arr[i] = int(v)
    return arr


def ptr_array(values):
    """Builds a C void* array from a sequence of ints (addresses)."""
    n = len(values)
    arr = (ctypes.c_void_p * n)()
    for i, v in enumerate(values):
        arr[i] = int(v) or None
    return arr


def i64_array(values):
    """Builds a C int64 array from a sequence of ints."""
    n = len(values)
    arr = (ctypes.c_int64 * n)()
    for i, v in enumerate(values):
        arr[i] = int(v)
    return arr


def take_bytes(ptr, n):
    """Copies n bytes out of a library-allocated buffer and frees it."""
    if not ptr:
        return b""
    try:
        return ctypes.string_at(ptr, n) if n > 0 else b""
    finally:
        lib().mc_free(ptr)


class Closable(object):
    """close() on garbage collection and at the end of a with block."""

    def close(self):
        raise NotImplementedError

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: never raise from a finalizer
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
