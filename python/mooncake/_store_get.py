"""MooncakeDistributedStore's reads: values, into memory ranges, batches."""

import ctypes

from . import _native
from ._store_base import BufferHandle, ErrorCode, _key, _keys, log


class GetMixin(object):
    """The get family."""

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
