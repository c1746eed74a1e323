"""mooncake._fast_copy: Mooncake's scatter-gather copy of a list of numpy arrays.

``concat_arrays_into(arrays, dest_ptr, dest_size, start=0, count=-1, nthreads=1)`` copies
``arrays[start:start+count]`` (C-contiguous ``numpy.ndarray``s) back to back into the memory
at ``dest_ptr`` and returns the bytes copied. Mooncake builds it as a C extension; here the
copy runs in the Go library (``mc_gather_copy``, the GIL released by ctypes), split over up
to ``nthreads`` goroutines. Errors are Mooncake's: ``TypeError`` for a non-ndarray,
``ValueError`` for a non-contiguous array or a destination too small (checked before any
byte is written).
"""

import ctypes

import numpy as _np

from . import _native

__all__ = ["concat_arrays_into"]


def concat_arrays_into(arrays, dest_ptr, dest_size, start=0, count=-1, nthreads=1):
    if not isinstance(arrays, list):
        raise TypeError("arrays must be a list of numpy.ndarray")
    n = len(arrays)
    start = min(max(int(start), 0), n)
    count = int(count)
    if count < 0 or start + count > n:
        count = n - start
    if count == 0:
        return 0
    held = arrays[start:start + count]  # keeps the arrays alive during the copy
    ptrs = (ctypes.c_void_p * count)()
    sizes = (ctypes.c_uint64 * count)()
    total = 0
    for i, a in enumerate(held):
        if not isinstance(a, _np.ndarray):
            raise TypeError("arrays[%d] is not an ndarray" % (start + i))
        if not a.flags["C_CONTIGUOUS"]:
            raise ValueError("arrays[%d] is not C-contiguous" % (start + i))
        ptrs[i] = a.ctypes.data if a.nbytes else None
        sizes[i] = a.nbytes
        total += a.nbytes
    if total > int(dest_size):
        raise ValueError("destination buffer too small: need %d bytes, got %d" % (total, int(dest_size)))
    if total == 0:
        return 0
    rc = _native.lib().mc_gather_copy(int(dest_ptr) or None, int(dest_size), count, ptrs, sizes, max(1, int(nthreads)))
    if rc < 0:
        raise ValueError("concat_arrays_into failed: %s" % _native.last_error())
    return rc
