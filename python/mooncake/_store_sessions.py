"""MooncakeDistributedStore's put and get sessions.

Sessions are kept by the store object: a put session stages each value in
process memory until batch_put_session_end puts it (so the key is invisible
until then, as in Mooncake); a get session reads each value once at its start
and serves ranged reads from that copy until batch_get_session_end.
"""

import ctypes

from ._store_base import ErrorCode, _key, log


class SessionsMixin(object):
    """Put and get sessions."""

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
