"""The byte layer of the bundle transfer (``mooncake.structured_object_store``).

A bundle is metadata bytes plus named buffers, each stored under its own keys and found
through a JSON manifest. This module holds:

- the payload wrappers callers and codecs hand to a bundle (``_TensorPayload``,
  ``_TensorObjectBufferPayload``, ``_MultiBufferPayload``, ``_DirectCopyPayload``,
  ``_RawDestinationBuffer``) and the pool-backed arrays reads may return;
- the write-config helpers: one logical group id is spread over every physical key a write
  makes, and configs are copied, never changed in place;
- ``_cleanup_keys``: removal of written keys (``batch_remove`` with force, then per-key
  ``remove`` for what that left), strict or best effort;
- ``_PayloadTransport``: moving chunks through whatever the store offers, fastest first
  (``batch_put_from`` from pool leases, ``put_tensor_from``/``put_from``, ``get_into``,
  ``get_into_ranges``, ``batch_get_into`` into registered memory), falling back to plain
  ``put``/``get``.

Manifest layout (Mooncake's): ``{"version": 1, "layout": "bundle", "object_id":
"<partition>/<uuid>", "meta": spec, "buffers": {name: spec}}`` where a spec is ``{"key",
"bytes", "chunks": [{"key", "bytes"}]}``; a payload of one chunk is stored under its key,
more under ``<key>/chunk/<i>``.
"""

import copy
import ctypes
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np

DEFAULT_BUNDLE_CHUNK_BYTES = 64 << 20
AUTO_PARALLEL_MIN_BYTES = DEFAULT_BUNDLE_CHUNK_BYTES
AUTO_PARALLEL_MIN_CHUNKS = 8
MISSING_OBJECT_ERROR = -704  # what remove answers for a key that is already gone
_DUPLICATE_REGISTRATION = -600  # register_buffer of memory that is already registered


# ---------------------------------------------------------------------------
# Payload wrappers
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _TensorPayload:
    tensor: Any


@dataclass(frozen=True)
class _TensorObjectBufferPayload:
    """Memory at ``ptr`` that already holds a serialized tensor (header + data)."""

    ptr: int
    size: int
    owner: Any
    batch_size: Optional[int] = None

    def __len__(self):
        if self.batch_size is None:
            raise TypeError("tensor object buffer requires batch_size for DataProto use")
        return self.batch_size


@dataclass(frozen=True)
class _MultiBufferPayload:
    """One payload given as several buffers stored back to back."""

    buffers: tuple
    owners: tuple = ()
    dtype: Optional[str] = None
    shape: Optional[tuple] = None

    @property
    def nbytes(self):
        return sum(len(b) for b in self.buffers)


@dataclass(frozen=True)
class _DirectCopyPayload:
    """Arrays concatenated straight into pool memory when the payload is put."""

    arrays: list
    total_bytes: int
    dtype: Optional[str] = None
    shape: Optional[tuple] = None

    @property
    def nbytes(self):
        return self.total_bytes

    @staticmethod
    def from_flat_arrays(flat_arrays, dtype, total_elems):
        return _DirectCopyPayload(arrays=flat_arrays, total_bytes=sum(a.nbytes for a in flat_arrays),
                                  dtype=np.dtype(dtype).str, shape=(total_elems,))


@dataclass(frozen=True)
class _RawDestinationBuffer:
    """Caller memory to read into; ``pre_registered`` skips registering it with the store."""

    ptr: int
    size: int
    owner: Any = None
    pre_registered: bool = False


def tensor_object_buffer(ptr, size, owner=None, batch_size=None):
    """A serialized tensor (Mooncake's header then data) at ``ptr``: put with
    ``put_tensor_from`` as it is, or the destination of a tensor member's read."""
    return _TensorObjectBufferPayload(ptr=int(ptr), size=int(size), owner=owner, batch_size=batch_size)


def raw_destination(ptr, size, owner=None, *, pre_registered=False):
    """Caller memory of ``size`` bytes at ``ptr`` to materialize a member into; ``owner`` is
    kept referenced for the read."""
    return _RawDestinationBuffer(ptr=int(ptr), size=int(size), owner=owner, pre_registered=pre_registered)


class _PoolLeaseOwner(object):
    """Releases a buffer-pool lease once (explicitly or when collected)."""

    def __init__(self, lease):
        self.lease = lease
        self.released = False

    def release(self):
        if not self.released:
            self.released = True
            self.lease.release()

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


class _PoolBackedNdarray(np.ndarray):
    """An array over a pool lease; views share the lease owner (keep the base alive)."""

    def __new__(cls, owner, dtype, shape):
        dtype = np.dtype(dtype)
        nbytes = _nbytes_of(shape, dtype)
        raw = (ctypes.c_uint8 * nbytes).from_address(owner.lease.ptr)
        arr = np.frombuffer(raw, dtype=np.uint8).view(dtype).reshape(shape).view(cls)
        arr._mooncake_pool_owner = owner
        return arr

    def __array_finalize__(self, obj):
        if obj is not None:
            self._mooncake_pool_owner = getattr(obj, "_mooncake_pool_owner", None)


def _nbytes_of(shape, dtype):
    n = 1
    for d in shape:
        n *= int(d)
    return n * np.dtype(dtype).itemsize


def _array_at(ptr, dtype, shape):
    """A numpy view of raw memory."""
    nbytes = _nbytes_of(shape, dtype)
    if nbytes == 0:
        return np.empty(shape, dtype=dtype)
    raw = (ctypes.c_uint8 * nbytes).from_address(ptr)
    return np.frombuffer(raw, dtype=np.uint8).view(dtype).reshape(shape)


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------

def _bytes_view(value, name):
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError("%s must be bytes-like, got %s" % (name, type(value).__name__))
    if not view.contiguous:
        view = memoryview(view.tobytes())
    return view.cast("B")


def _buffer_ptr(buf):
    if isinstance(buf, np.ndarray):
        return int(buf.ctypes.data)
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def _buffer_nbytes(buf):
    return int(buf.nbytes) if isinstance(buf, np.ndarray) else len(buf)


def _split_view(view, chunk_bytes):
    if len(view) == 0:
        return [view]
    return [view[i:i + chunk_bytes] for i in range(0, len(view), chunk_bytes)]


def _split_buffers(buffers, chunk_bytes):
    """Buffers laid back to back, cut into groups of parts of ``chunk_bytes`` each."""
    if len(buffers) == 1:
        return [[part] for part in _split_view(buffers[0], chunk_bytes)]
    groups, current, filled = [], [], 0
    for buf in buffers:
        pos = 0
        while pos < len(buf):
            part = buf[pos:pos + chunk_bytes - filled]
            current.append(part)
            filled += len(part)
            pos += len(part)
            if filled == chunk_bytes:
                groups.append(current)
                current, filled = [], 0
    if current:
        groups.append(current)
    return groups


def _group_nbytes(group):
    return sum(len(b) for b in group)


def _copy_group_to_lease(group, lease):
    """The parts of a group copied back to back into a pool lease."""
    bulk = getattr(lease, "copy_from_buffers", None)
    if callable(bulk):
        bulk(group)
        return
    view = lease.buffer
    try:
        dest = view.cast("B") if view.format != "B" else view
        pos = 0
        for part in group:
            n = len(part)
            if n:
                dest[pos:pos + n] = part.cast("B") if part.format != "B" else part
                pos += n
    finally:
        view.release()


def _fragments(chunks, offset, length, dest_offset=0):
    """(key, chunk size, destination offset, offset in chunk, size) of each chunk piece
    that covers bytes [offset, offset+length) of a payload."""
    out = []
    end = offset + length
    base = 0
    for chunk in chunks:
        size = int(chunk["bytes"])
        lo, hi = max(offset, base), min(end, base + size)
        if lo < hi:
            out.append((chunk["key"], size, dest_offset + lo - offset, lo - base, hi - lo))
        base += size
    return out


def _tensor_nbytes(tensor):
    """Data bytes of a torch tensor (older torch has no ``nbytes``)."""
    n = getattr(tensor, "nbytes", None)
    if n is None:
        n = tensor.numel() * tensor.element_size()
    return int(n)


def _check_status(status, operation, key):
    if status not in (None, 0):
        raise RuntimeError("%s failed for %s: %s" % (operation, key, status))


# ---------------------------------------------------------------------------
# Write configs and their group ids
# ---------------------------------------------------------------------------

_CONFIG_FIELDS = ("data_type", "group_ids", "nof_replica_num", "prefer_alloc_in_same_node",
                  "preferred_nof_segments", "preferred_segment", "preferred_segments", "replica_num",
                  "with_hard_pin", "with_soft_pin")

_GROUP_ERROR = ("structured object store config.group_ids must contain exactly one logical group id; "
                "it is expanded across internal Mooncake keys")


def _copy_write_config(config):
    """A copy of a write config: ``copy.copy``, else a default instance with the known fields set."""
    try:
        return copy.copy(config)
    except TypeError:
        pass
    try:
        fresh = type(config)()
    except Exception as e:
        raise TypeError("structured object store config must be copyable or default-constructible") from e
    for name in _CONFIG_FIELDS:
        if not hasattr(config, name):
            continue
        try:
            value = getattr(config, name)
        except Exception:
            continue
        if isinstance(value, (list, tuple)):
            value = type(value)(value)
        try:
            setattr(fresh, name, value)
        except Exception as e:
            raise TypeError("structured object store config field %r is not writable" % name) from e
    return fresh


def _config_for_grouped_keys(config, key_count):
    """The config for one write of ``key_count`` keys: its single group id repeated per key
    (a copy; the caller's config is never changed). No group: the config as it is; an empty
    group list: a copy without groups."""
    if config is None or key_count <= 0:
        return config
    ids = getattr(config, "group_ids", None)
    if ids is None:
        return config
    was_str = isinstance(ids, str)
    ids = [ids] if was_str else list(ids)
    if not ids:
        out = _copy_write_config(config)
        out.group_ids = None
        return out
    if len(ids) != 1:
        raise ValueError(_GROUP_ERROR)
    if key_count == 1 and not was_str:
        return config
    out = _copy_write_config(config)
    out.group_ids = [ids[0]] * key_count
    return out


def _config_with_group_id(config, group_id, replicate_config_cls=None):
    """config (or a new ReplicateConfig) with its group set to ``group_id``; a different
    group already in it is a ValueError."""
    current = getattr(_config_for_grouped_keys(config, 1), "group_ids", None)
    if current and current[0] and current[0] != group_id:
        raise ValueError("config.group_ids conflicts with the DataProto storage group")
    if config is None:
        out = (replicate_config_cls or SimpleNamespace)()
    else:
        out = _copy_write_config(config)
    out.group_ids = [group_id]
    return out


def _call_with_config(fn, *args, config=None):
    if config is None:
        return fn(*args)
    return fn(*args, config=config)


def _put_with_config(store, key, value, config=None):
    return _call_with_config(store.put, key, value, config=_config_for_grouped_keys(config, 1))


def _put_from_with_config(store, key, ptr, size, config=None):
    config = _config_for_grouped_keys(config, 1)
    put_tensor_from = getattr(store, "put_tensor_from", None)
    if config is None and callable(put_tensor_from):
        return put_tensor_from(key, ptr, size)
    put_from = getattr(store, "put_from", None)
    if callable(put_from):
        return _call_with_config(put_from, key, ptr, size, config=config)
    raise RuntimeError("put_from is unavailable")


def _batch_put_from_with_config(batch_put_from, keys, ptrs, sizes, config=None):
    return _call_with_config(batch_put_from, list(keys), list(ptrs), list(sizes),
                             config=_config_for_grouped_keys(config, len(keys)))


# ---------------------------------------------------------------------------
# Removal
# ---------------------------------------------------------------------------

def _cleanup_keys(store, keys, strict):
    """Removes keys (forced). ``batch_remove`` first where the store has it; keys it did not
    remove are retried one by one. A key already gone counts as removed. strict: errors are
    raised; otherwise removal is best effort."""
    pending = list(dict.fromkeys(keys))
    if not pending:
        return
    batch_remove = getattr(store, "batch_remove", None)
    if callable(batch_remove):
        try:
            try:
                results = batch_remove(pending, True)
            except TypeError:
                results = batch_remove(pending)
            if len(results) != len(pending):
                raise RuntimeError("batch_remove returned %d results for %d keys" % (len(results), len(pending)))
            pending = [k for k, rc in zip(pending, results) if rc not in (None, 0, MISSING_OBJECT_ERROR)]
            if not pending:
                return
        except Exception:
            if strict:
                raise
    failed = []
    for key in pending:
        try:
            rc = store.remove(key, True)
        except KeyError:
            continue
        except Exception:
            if strict:
                raise
            continue
        if rc not in (None, 0, MISSING_OBJECT_ERROR):
            failed.append((key, rc))
    if failed and strict:
        raise RuntimeError("failed to remove %d Mooncake keys: %s" % (len(failed), failed[:3]))


# ---------------------------------------------------------------------------
# The transport
# ---------------------------------------------------------------------------

class _PayloadTransport(object):
    """Moves payload chunks in and out of a store through the fastest calls it has."""

    def __init__(self, store, buffer_pool=None):
        self._store = store
        self._buffer_pool = buffer_pool
        self._batch_put_from = getattr(store, "batch_put_from", None)
        self._put_tensor_from = getattr(store, "put_tensor_from", None)
        self._batch_get_into = getattr(store, "batch_get_into", None)
        self._get_into = getattr(store, "get_into", None)
        self._get_into_ranges = getattr(store, "get_into_ranges", None)
        self._register_buffer = getattr(store, "register_buffer", None)
        self._unregister_buffer = getattr(store, "unregister_buffer", None)

    # -- the buffer pool --------------------------------------------------------------

    def _ensure_buffer_pool(self):
        """The pool leases come from: the one given, else one made over a real client."""
        if self._buffer_pool is not None:
            return self._buffer_pool
        capsule = getattr(self._store, "_get_pyclient_capsule", None)
        if not callable(capsule):
            return None
        try:
            if capsule() is None:
                return None
            from .buffer_pool import BufferPool
            self._buffer_pool = BufferPool(self._store)
        except Exception:
            return None
        return self._buffer_pool

    def _has_buffer_registration_support(self):
        return callable(self._register_buffer) and callable(self._unregister_buffer)

    # -- writes -----------------------------------------------------------------------

    def _resolve_buffer_group_put_mode(self, chunk_groups, policy):
        """``batch`` (one chunk after another) or ``parallel`` (groups of chunks on
        ``max_inflight_put`` threads): auto picks parallel only for at least
        AUTO_PARALLEL_MIN_CHUNKS chunks totalling AUTO_PARALLEL_MIN_BYTES."""
        if policy.put_mode in ("batch", "parallel"):
            return policy.put_mode
        if policy.max_inflight_put <= 1 or len(chunk_groups) < AUTO_PARALLEL_MIN_CHUNKS:
            return "batch"
        if sum(_group_nbytes(g) for g in chunk_groups) < AUTO_PARALLEL_MIN_BYTES:
            return "batch"
        return "parallel"

    def put_chunk_groups(self, chunk_keys, chunk_groups, policy, config=None):
        """Stores each group of buffers (concatenated) under its key."""
        if policy.copy_mode == "zero_copy":
            raise RuntimeError("zero-copy put requires tensor-object buffers")
        if policy.copy_mode == "copy" or self._ensure_buffer_pool() is None:
            return self._put_chunks_direct(chunk_keys, chunk_groups, config)
        single = all(len(g) == 1 for g in chunk_groups)
        if not single and not callable(self._batch_put_from):
            return self._put_chunks_direct(chunk_keys, chunk_groups, config)
        if single or self._resolve_buffer_group_put_mode(chunk_groups, policy) == "batch":
            self.batch_put_buffer_groups_from(chunk_keys, chunk_groups, config)
            return list(chunk_keys)
        return self._put_groups_parallel(list(chunk_keys), list(chunk_groups), policy.max_inflight_put, config)

    def _put_chunks_direct(self, chunk_keys, chunk_groups, config=None):
        written = []
        try:
            for key, group in zip(chunk_keys, chunk_groups):
                data = group[0] if len(group) == 1 else memoryview(b"".join(bytes(p) for p in group))
                _check_status(_put_with_config(self._store, key, data, config), "put", key)
                written.append(key)
        except Exception:
            _cleanup_keys(self._store, written, strict=False)
            raise
        return list(chunk_keys)

    def batch_put_buffer_groups_from(self, chunk_keys, chunk_groups, config=None):
        """One chunk at a time: lease, copy, ``batch_put_from`` of that key, release."""
        if not callable(self._batch_put_from):
            raise RuntimeError("batch_put_from is unavailable")
        pool = self._buffer_pool
        for key, group in zip(chunk_keys, chunk_groups):
            size = _group_nbytes(group)
            lease = pool.acquire(size)
            try:
                _copy_group_to_lease(group, lease)
                results = _batch_put_from_with_config(self._batch_put_from, [key], [lease.ptr], [size], config)
                self._check_batch_put_results(results, [key], "batch_put_from")
            except Exception:
                _cleanup_keys(self._store, chunk_keys, strict=False)
                raise
            finally:
                lease.release()

    @staticmethod
    def _check_batch_put_results(results, keys, operation):
        if len(results) != len(keys):
            raise RuntimeError("%s returned %d results for %d chunks" % (operation, len(results), len(keys)))
        for key, rc in zip(keys, results):
            _check_status(rc, operation, key)

    def _put_groups_parallel(self, chunk_keys, chunk_groups, max_inflight, config=None):
        n = len(chunk_groups)
        workers = max(1, min(max_inflight, n))
        per = (n + workers - 1) // workers
        slices = [(chunk_keys[i:i + per], chunk_groups[i:i + per]) for i in range(0, n, per)]
        futures = []
        try:
            with ThreadPoolExecutor(max_workers=min(max_inflight, len(slices))) as pool:
                futures = [pool.submit(self.batch_put_buffer_groups_from, k, g, config) for k, g in slices]
                for f in as_completed(futures):
                    f.result()
        except Exception:
            for f in futures:
                f.cancel()
            _cleanup_keys(self._store, chunk_keys, strict=False)
            raise
        return chunk_keys

    def put_tensor_object_buffer(self, key, value, config=None):
        if not callable(self._put_tensor_from) and not callable(getattr(self._store, "put_from", None)):
            raise RuntimeError("put_from is unavailable")
        _check_status(_put_from_with_config(self._store, key, value.ptr, value.size, config), "put_from", key)
        return value.size

    def put_tensor_payload_direct(self, key, value, config=None, metadata_bytes=0):
        """The tensor through the store's tensor API (``put_tensor``; ``pub_tensor`` with a
        config); None when the store has no such call."""
        fn = getattr(self._store, "put_tensor" if config is None else "pub_tensor", None)
        if not callable(fn):
            return None
        tensor = value.tensor
        total = metadata_bytes + _tensor_nbytes(tensor)
        _check_status(_call_with_config(fn, key, tensor, config=_config_for_grouped_keys(config, 1)),
                      "put_tensor", key)
        return {"key": key, "kind": "tensor", "bytes": total, "dtype": str(getattr(tensor, "dtype", "")),
                "shape": list(getattr(tensor, "shape", ())), "chunks": [{"key": key, "bytes": total}],
                "metadata_bytes": metadata_bytes}

    def put_tensor_payload_from_pool(self, key, header, data_ptr, nbytes, owner, config=None):
        """Header and tensor data copied into one pool lease, stored with ``put_from``."""
        if self._buffer_pool is None:
            raise RuntimeError("structured tensor zero-copy requires a BufferPool")
        if not callable(self._put_tensor_from) and not callable(getattr(self._store, "put_from", None)):
            raise RuntimeError("put_from is unavailable")
        total = len(header) + nbytes
        lease = self._buffer_pool.acquire(total)
        try:
            ctypes.memmove(lease.ptr, bytes(header), len(header))
            if nbytes:
                ctypes.memmove(lease.ptr + len(header), data_ptr, nbytes)
            _check_status(_put_from_with_config(self._store, key, lease.ptr, total, config), "put_from", key)
            return total
        finally:
            lease.release()

    # -- registration -----------------------------------------------------------------

    def _register(self, ptr, size, label):
        """Registers memory; True when this call registered it (False: already registered)."""
        if not self._has_buffer_registration_support():
            raise RuntimeError("register_buffer APIs are unavailable for %s" % label)
        if size == 0:
            return False
        rc = self._register_buffer(ptr, size)
        if rc == 0:
            return True
        if rc == _DUPLICATE_REGISTRATION:
            return False
        _check_status(rc, "register_buffer", label)
        return False

    @contextmanager
    def _registered_buffer(self, destination, label, pre_registered=False):
        ptr = _buffer_ptr(destination)
        if pre_registered:
            yield ptr
            return
        mine = self._register(ptr, _buffer_nbytes(destination), label)
        ok = False
        try:
            yield ptr
            ok = True
        finally:
            if mine:
                try:
                    _check_status(self._unregister_buffer(ptr), "unregister_buffer", label)
                except Exception:
                    if ok:
                        raise

    # -- reads ------------------------------------------------------------------------

    def read_payload(self, spec):
        total = int(spec["bytes"])
        if total == 0:
            return b""
        out = bytearray(total)
        self.read_payload_into(spec, out)
        return bytes(out)

    def read_payload_into(self, spec, destination):
        chunks = spec["chunks"]
        offsets, pos = [], 0
        for c in chunks:
            offsets.append(pos)
            pos += int(c["bytes"])
        if callable(self._batch_get_into) and self._has_buffer_registration_support():
            with self._registered_buffer(destination, "bundle payload") as base:
                keys = [c["key"] for c in chunks]
                sizes = [int(c["bytes"]) for c in chunks]
                got = self._batch_get_into(keys, [base + o for o in offsets], sizes)
                if len(got) != len(keys):
                    raise RuntimeError("batch_get_into returned %d results for %d chunks" % (len(got), len(keys)))
                for key, want, n in zip(keys, sizes, got):
                    if n != want:
                        raise RuntimeError("batch_get_into failed for %s: expected %d, got %s" % (key, want, n))
            return
        for off, c in zip(offsets, chunks):
            size = int(c["bytes"])
            if size == 0:
                continue
            data = self._get_exact(c["key"], size)
            if isinstance(destination, np.ndarray):
                destination[off:off + size] = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
            else:
                destination[off:off + size] = data

    def _get_exact(self, key, size):
        data = self._store.get(key)
        if len(data) != size:
            raise RuntimeError("get failed for %s: expected %d bytes, got %d" % (key, size, len(data)))
        return data

    def read_tensor_payload(self, spec):
        get_tensor = getattr(self._store, "get_tensor", None)
        if not callable(get_tensor):
            raise RuntimeError("structured tensor payload does not support get_tensor")
        return get_tensor(spec["key"])

    def read_tensor_payload_into(self, spec, destination):
        if spec.get("kind") == "tensor":
            fn = getattr(self._store, "get_tensor_into", None)
            if not callable(fn):
                raise RuntimeError("structured tensor payload does not support get_tensor_into")
            return fn(spec["key"], destination.ptr, destination.size)
        total = int(spec["bytes"])
        if destination.size < total:
            raise ValueError("tensor destination has %d bytes, expected at least %d" % (destination.size, total))
        if not self._ranges_into_ptr(spec["chunks"], destination.ptr, [(0, 0, total)]):
            pos = 0
            for c in spec["chunks"]:
                size = int(c["bytes"])
                data = self._get_exact(c["key"], size)
                ctypes.memmove(destination.ptr + pos, data, size)
                pos += size
        return None

    def _ranges_into_ptr(self, chunks, base_ptr, ranges, allow_get_into=False):
        """Byte ranges (src offset, dest offset, size) of a payload read into memory at
        base_ptr with one ``get_into_ranges`` (or ``get_into`` for a whole single chunk);
        False when the store has neither."""
        if allow_get_into and len(ranges) == 1 and len(chunks) == 1 and callable(self._get_into):
            src, dst, size = ranges[0]
            if src == 0 and int(chunks[0]["bytes"]) == size:
                n = self._get_into(chunks[0]["key"], base_ptr + dst, size)
                if n != size:
                    raise RuntimeError("get_into failed for %s: expected %d, got %s" % (chunks[0]["key"], size, n))
                return True
        if not callable(self._get_into_ranges):
            return False
        frags = []
        for src, dst, size in ranges:
            frags.extend(_fragments(chunks, src, size, dst))
        if not frags:
            return True
        keys = [f[0] for f in frags]
        sizes = [[f[4]] for f in frags]
        results = self._get_into_ranges([base_ptr], [keys], [[[f[2]] for f in frags]],
                                        [[[f[3]] for f in frags]], [sizes])
        if len(results) != 1 or len(results[0]) != len(keys):
            raise RuntimeError("get_into_ranges returned invalid ranged result shape for %d chunks" % len(keys))
        for key, want, got in zip(keys, sizes, results[0]):
            if list(got) != want:
                raise RuntimeError("get_into_ranges failed for %s: expected %s, got %s" % (key, want, list(got)))
        return True

    def _ranges_by_get(self, chunks, destination, ranges):
        """The fallback: whole chunks fetched with ``get`` and the pieces copied."""
        for src, dst, size in ranges:
            for key, csize, doff, soff, n in _fragments(chunks, src, size, dst):
                data = self._get_exact(key, csize)
                piece = memoryview(data).cast("B")[soff:soff + n]
                if isinstance(destination, np.ndarray):
                    destination[doff:doff + n] = np.frombuffer(piece, dtype=np.uint8)
                else:
                    destination[doff:doff + n] = piece

    def read_ranges_into(self, spec, destination, ranges, pre_registered=False, allow_get_into=True):
        """Ranges of a payload into a bytearray or uint8 array: registered and read by
        range where the store can, else through ``get``."""
        if not ranges:
            return
        if self._has_buffer_registration_support() and (
                callable(self._get_into_ranges) or (allow_get_into and callable(self._get_into))):
            with self._registered_buffer(destination, "structured payload", pre_registered) as base:
                if self._ranges_into_ptr(spec["chunks"], base, ranges, allow_get_into):
                    return
        self._ranges_by_get(spec["chunks"], destination, ranges)

    def read_payload_range(self, spec, offset, length):
        if length == 0:
            return b""
        out = bytearray(length)
        self.read_ranges_into(spec, out, [(offset, 0, length)], allow_get_into=False)
        return bytes(out)

    def read_ranges_into_raw(self, spec, ptr, ranges):
        """Ranges into pre-registered memory at ptr; the get fallback copies through Python."""
        if not ranges:
            return
        if self._ranges_into_ptr(spec["chunks"], ptr, ranges):
            return
        for src, dst, size in ranges:
            data = self.read_payload_range(spec, src, size)
            ctypes.memmove(ptr + dst, data, size)

    def read_range_into_pool_array(self, spec, dtype, shape, offset):
        """Bytes from ``offset`` as an array in a fresh pool lease (released with the array);
        None without a pool or ranged reads."""
        nbytes = _nbytes_of(shape, dtype)
        if nbytes == 0:
            return np.empty(shape, dtype=dtype)
        pool = self._ensure_buffer_pool()
        if pool is None or not callable(self._get_into_ranges):
            return None
        try:
            lease = pool.acquire(nbytes)
        except RuntimeError:
            return None
        owner = _PoolLeaseOwner(lease)
        try:
            self._ranges_into_ptr(spec["chunks"], lease.ptr, [(offset, 0, nbytes)])
        except Exception:
            owner.release()
            raise
        return _PoolBackedNdarray(owner, dtype, shape)
