"""GPU memory through libmooncake.so: the CUDA driver the Go library loaded.

The library loads ``$MOONCAKE_CUDA_LIB`` (a path: the simulated driver in
tests) or ``libcuda.so.1`` once per process. Without a driver or a device,
:func:`supported` is False and every engine and store call behaves as on a
CPU host. With one, device pointers (``tensor.data_ptr()`` of a CUDA tensor,
or :func:`alloc`) are accepted where host pointers are: the library copies
them with the driver and never dereferences them, and neither does this
package (a host read of device memory would crash the process).
"""

import ctypes

from . import _native

_supported = None


def supported():
    """True when the CUDA driver library loads and a device node exists (SUPPORT_CUDA).

    Checked without initialising CUDA, so importing before a fork is safe."""
    global _supported
    if _supported is None:
        try:
            lib = _native.lib()
            _supported = bool(getattr(lib, "mc_cuda_supported", None) and lib.mc_cuda_supported() == 1)
        except ImportError:
            _supported = False
    return _supported


_has_device_call = None


def device_of(ptr):
    """The CUDA device ordinal of address ptr, or -1 for host memory.

    Asks the library's driver (initialising it on first use) whatever
    SUPPORT_CUDA says: a device pointer must never be read as host memory."""
    global _has_device_call
    if not ptr:
        return -1
    if _has_device_call is None:
        try:
            _has_device_call = getattr(_native.lib(), "mc_cuda_device", None) is not None
        except ImportError:
            _has_device_call = False
    if not _has_device_call:
        return -1
    return int(_native.lib().mc_cuda_device(int(ptr)))


def is_device(ptr):
    return device_of(ptr) >= 0


def memcpy(dst, src, n):
    """Copies n bytes from address src to dst, each host or device memory. 0 or negative."""
    return int(_native.lib().mc_cuda_memcpy(int(dst), int(src), int(n)))


def to_host(ptr, n):
    """n bytes at ptr (host or device memory) as bytes."""
    if not is_device(ptr):
        return ctypes.string_at(int(ptr), int(n))
    buf = ctypes.create_string_buffer(int(n))
    if memcpy(ctypes.addressof(buf), ptr, n) != 0:
        raise OSError("mooncake: copy from device memory failed: %s" % _native.last_error())
    return buf.raw


def from_host(ptr, data):
    """Writes bytes-like data at ptr (host or device memory)."""
    data = bytes(data)
    if not data:
        return
    if not is_device(ptr):
        ctypes.memmove(int(ptr), data, len(data))
        return
    src = ctypes.create_string_buffer(data, len(data))
    if memcpy(ptr, ctypes.addressof(src), len(data)) != 0:
        raise OSError("mooncake: copy to device memory failed: %s" % _native.last_error())


def stream_sync(device, stream_ptr):
    """Waits for the work queued on a cudaStream_t of device. 0 or negative."""
    return int(_native.lib().mc_cuda_stream_sync(int(device), int(stream_ptr or 0)))


def alloc(n, device=0):
    """n bytes of device memory (for tests and benchmarks without torch); 0 on failure."""
    return int(_native.lib().mc_cuda_alloc(int(device), int(n)) or 0)


def free(ptr, device=0):
    return int(_native.lib().mc_cuda_free(int(device), int(ptr)))
