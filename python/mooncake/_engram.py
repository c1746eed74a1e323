"""Mooncake's ``EngramStore`` (``mooncake.store``): n-gram embedding tables kept in the store.

One ``EngramStore`` is one layer: ``config.table_vocab_sizes`` gives the rows of each head's
table and ``config.embedding_dim`` their width (float32). Head ``h`` of layer ``l`` is the
store object ``engram:l<l>:h<h>``, the table's rows back to back. ``populate(tables)`` puts
every head's table (all keys must be absent; on a failure the heads already put are removed
again), ``lookup(row_ids)`` gathers the rows named by ``row_ids`` (``[B][L][H]``, a nested
list or an int array) into a float32 array ``[B, L, H, D]``, ``remove_from_store(force)``
removes the layer's tables and returns how many existed.

A lookup reads only the rows it needs, straight into the output array (registered for the
call): one ranged read per head (``mc_store_get_ranges``, one transfer batch of ``B * L``
rows), as Mooncake's ``get_into_ranges``. A dummy client, which has no ranged reads, reads the
tables whole and gathers the rows in process. Failures raise as in Mooncake: ``ValueError``
for a bad config, ``RuntimeError`` for a failed call.
"""

import ctypes
import logging

import numpy as np

from . import _native
from ._store_base import ErrorCode

log = logging.getLogger("mooncake")

__all__ = ["EngramStore", "EngramStoreConfig"]

_CAPSULE_NAME = b"mooncake.PyClient.shared_ptr"


class EngramStoreConfig(object):
    """Mooncake's ``EngramStoreConfig``: ``table_vocab_sizes`` (rows per head) and ``embedding_dim``."""

    def __init__(self):
        self.table_vocab_sizes = []
        self.embedding_dim = 0

    def __repr__(self):
        return "EngramStoreConfig(table_vocab_sizes=%r, embedding_dim=%r)" % (self.table_vocab_sizes,
                                                                               self.embedding_dim)


def _unwrap_store(store):
    """The MooncakeDistributedStore behind store: the store itself, or what its
    ``_get_pyclient_capsule()`` names (Mooncake's wrapper protocol); None for None."""
    from . import store as _store_mod

    if store is None:
        return None
    if isinstance(store, _store_mod.MooncakeDistributedStore):
        return store
    getter = getattr(store, "_get_pyclient_capsule", None)
    if getter is None:
        raise RuntimeError("EngramStore store parameter must be a PyClient or store wrapper that "
                           "implements _get_pyclient_capsule()")
    capsule = getter()
    if capsule is None:
        return None
    found = _store_mod._store_from_capsule(capsule)
    if found is None:
        raise RuntimeError("store wrapper returned an unexpected PyClient capsule")
    return found


class EngramStore(object):
    def __init__(self, layer_id, config, store=None):
        vocab = [int(v) for v in config.table_vocab_sizes]
        dim = int(config.embedding_dim)
        if not vocab:
            raise ValueError("EngramStoreConfig.table_vocab_sizes must not be empty")
        if dim <= 0:
            raise ValueError("EngramStoreConfig.embedding_dim must be positive")
        if any(v <= 0 for v in vocab):
            raise ValueError("EngramStoreConfig.table_vocab_sizes must contain only positive values")
        self._vocab = vocab
        self._dim = dim
        self._keys = ["engram:l%d:h%d" % (int(layer_id), h) for h in range(len(vocab))]
        self._store = _unwrap_store(store)

    def get_table_vocab_sizes(self):
        return list(self._vocab)

    def get_store_keys(self):
        return list(self._keys)

    def get_num_heads(self):
        return len(self._vocab)

    def get_embedding_dim(self):
        return self._dim

    def remove_from_store(self, force=False):
        """Removes the layer's tables: the number removed (missing ones are skipped)."""
        if self._store is None:
            raise RuntimeError("remove_from_store failed, rc=%d" % ErrorCode.INVALID_PARAMS)
        removed, first_error = 0, 0
        for key in self._keys:
            rc = self._store.remove(key, bool(force))
            if rc == 0:
                removed += 1
            elif rc != ErrorCode.OBJECT_NOT_FOUND and not first_error:
                first_error = rc
        if first_error:
            raise RuntimeError("remove_from_store failed, rc=%d" % first_error)
        return removed

    def populate(self, embedding_buffers):
        """Puts one float32 table [vocab, D] per head; every key must be absent."""
        if len(embedding_buffers) != len(self._keys):
            raise RuntimeError("embedding_buffers size must match num_heads")
        tables = []
        for i, buf in enumerate(embedding_buffers):
            if not isinstance(buf, np.ndarray):
                raise RuntimeError("embedding_buffers must be NumPy arrays")
            a = np.ascontiguousarray(buf, dtype=np.float32)
            if a.ndim != 2:
                raise RuntimeError("each embedding buffer must be 2D [N_h, D]")
            if a.shape != (self._vocab[i], self._dim):
                raise RuntimeError("embedding buffer shape does not match get_table_vocab_sizes()/get_embedding_dim()")
            tables.append(a)
        st = self._store
        if st is None:
            raise RuntimeError("populate failed")
        exists = st.batch_is_exist(self._keys)
        if len(exists) != len(self._keys) or any(e != 0 for e in exists):
            log.error("EngramStore.populate: keys %s must all be absent (is_exist: %s); remove the layer first",
                      self._keys, exists)
            raise RuntimeError("populate failed")
        results = st.batch_put_from(self._keys, [t.ctypes.data for t in tables], [t.nbytes for t in tables])
        if len(results) == len(self._keys) and all(r == 0 for r in results):
            return None
        for key, rc in zip(self._keys, list(results) + [None] * len(self._keys)):
            if rc == 0:  # roll back the heads that were put
                rrc = st.remove(key, True)
                if rrc not in (0, ErrorCode.OBJECT_NOT_FOUND):
                    log.error("EngramStore.populate: rolling back %s failed (%d)", key, rrc)
        log.error("EngramStore.populate: batch_put_from answered %s", results)
        raise RuntimeError("populate failed")

    def _row_ids(self, row_ids):
        heads = len(self._vocab)
        if isinstance(row_ids, np.ndarray):
            ids = np.ascontiguousarray(row_ids, dtype=np.int64)
            if ids.ndim != 3:
                raise RuntimeError("row_ids array must have shape [B, L, H]")
            if ids.shape[2] != heads:
                raise RuntimeError("row_ids last dimension must match num_heads")
            if ids.shape[0] == 0 or ids.shape[1] == 0:
                raise RuntimeError("row_ids must not be empty")
            return ids
        rows = [[list(tok) for tok in batch] for batch in row_ids]
        if not rows or not rows[0]:
            raise RuntimeError("row_ids must not be empty")
        length = len(rows[0])
        if any(len(b) != length for b in rows) or any(len(t) != heads for b in rows for t in b):
            raise RuntimeError("EngramStore lookup failed")
        return np.asarray(rows, dtype=np.int64)

    def lookup(self, row_ids):
        """The rows named by row_ids ([B][L][H]) as float32 [B, L, H, D]."""
        ids = self._row_ids(row_ids)
        st = self._store
        if st is None:
            raise RuntimeError("EngramStore lookup failed")
        vocab = np.asarray(self._vocab, dtype=np.int64)
        if (ids < 0).any() or (ids >= vocab).any():
            raise RuntimeError("EngramStore lookup failed")
        b, l, h = ids.shape
        out = np.empty((b, l, h, self._dim), dtype=np.float32)
        rc = self._read_rows(st, ids, out)
        if rc == 0:
            return out
        if rc == ErrorCode.OBJECT_NOT_FOUND:
            log.error("EngramStore.lookup: a table of %s is missing", self._keys)
            raise RuntimeError("EngramStore lookup failed")
        # No ranged reads (a dummy client): read the tables whole and gather in process.
        tables = [np.empty((v, self._dim), dtype=np.float32) for v in self._vocab]
        got = st.batch_get_into(self._keys, [t.ctypes.data for t in tables], [t.nbytes for t in tables])
        if len(got) != len(tables) or any(int(g) != t.nbytes for g, t in zip(got, tables)):
            log.error("EngramStore.lookup: reading the tables %s answered %s", self._keys, got)
            raise RuntimeError("EngramStore lookup failed")
        for head, table in enumerate(tables):
            out[:, :, head, :] = table[ids[:, :, head]]
        return out

    def _read_rows(self, st, ids, out):
        """Reads each needed row straight into out, one ranged read per head: 0 or a code."""
        lib = _native.lib()
        if getattr(lib, "mc_store_get_ranges", None) is None:
            return ErrorCode.INVALID_PARAMS
        row = self._dim * 4
        base = out.ctypes.data
        if st.register_buffer(base, out.nbytes) != 0:
            return ErrorCode.INVALID_PARAMS
        try:
            b, l, h = ids.shape
            # out[bi, li, head] sits at ((bi * l + li) * h + head) * row
            tok = (np.arange(b * l, dtype=np.uint64) * np.uint64(h)).reshape(b, l)
            for head, key in enumerate(self._keys):
                offs = (ids[:, :, head].astype(np.uint64) * np.uint64(row)).ravel()
                dsts = ((tok + np.uint64(head)) * np.uint64(row) + np.uint64(base)).ravel()
                n = offs.size
                rc = lib.mc_store_get_ranges(
                    st._h, _native.cstr(key), n, offs.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
                    dsts.ctypes.data_as(ctypes.POINTER(ctypes.c_void_p)),
                    np.full(n, row, dtype=np.uint64).ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)))
                if rc != 0:
                    log.debug("EngramStore.lookup: ranged read of %s: %d (%s)", key, rc, _native.last_error())
                    return rc
            return 0
        finally:
            st.unregister_buffer(base)


# Capsules: Mooncake's store hands a PyCapsule named "mooncake.PyClient.shared_ptr" to
# EngramStore and BufferPool; ours carries the store's native handle.
_py_capsule_new = ctypes.pythonapi.PyCapsule_New
_py_capsule_new.restype = ctypes.py_object
_py_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_py_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_py_capsule_get.restype = ctypes.c_void_p
_py_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_py_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_py_capsule_name.restype = ctypes.c_char_p
_py_capsule_name.argtypes = [ctypes.py_object]
_name_buf = ctypes.create_string_buffer(_CAPSULE_NAME)  # outlives every capsule


def make_capsule(handle):
    return _py_capsule_new(int(handle), ctypes.addressof(_name_buf), None)


def capsule_handle(capsule):
    """The handle in one of our capsules, None for anything else."""
    if type(capsule).__name__ != "PyCapsule":
        return None
    try:
        if _py_capsule_name(capsule) != _CAPSULE_NAME:
            return None
        return int(_py_capsule_get(capsule, _CAPSULE_NAME) or 0) or None
    except Exception:
        return None
