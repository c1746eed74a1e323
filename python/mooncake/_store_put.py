"""MooncakeDistributedStore's puts and upserts: values, memory ranges, batches."""

import ctypes
import json

from . import _cuda, _native
from ._store_base import ErrorCode, _buffer_ptr, _key, _keys, log
from ._store_types import ReplicateConfig, SoftPinAction


_warned_ignored = set()  # (call, ignored ReplicateConfig fields) already logged


class PutMixin(object):
    """The put and upsert family."""

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
        ignored = tuple(config.ignored_fields())
        if ignored and (what, ignored) not in _warned_ignored:  # once per call and field set
            _warned_ignored.add((what, ignored))
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
        # either may be device memory: _cuda reads it with the driver
        value = _cuda.to_host(int(metadata_buffer_ptr), int(metadata_size)) if metadata_size else b""
        value += _cuda.to_host(int(buffer_ptr), int(size)) if size else b""
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

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        """Stores, for each key, the concatenation of several memory ranges; one code per key."""
        def one(key, ptrs, sizes):
            value = b"".join(ctypes.string_at(int(p), int(n)) for p, n in zip(ptrs, sizes))
            keep, ptr, n = _buffer_ptr(value)
            rc = self._put1("batch_put_from_multi_buffers", key, ptr, n, config, False, False)
            del keep
            return rc
        return self._per_key_ranges("batch_put_from_multi_buffers", keys, all_buffer_ptrs, all_sizes, one)
