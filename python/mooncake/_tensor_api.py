"""MooncakeDistributedStore's tensor methods (a mixin; see _tensor for the layout).

Return values are Mooncake's: puts give 0 or a negative code (batches one per
key), gets give a tensor or None (batches one per key), ``*_into`` gets give a
tensor viewing the caller's buffer or None, and a batch ``*_into`` with
mismatched arguments gives ``[-600] * len(keys)``.
"""

import ctypes
import logging

from . import _cuda
from . import _parallel_io as P
from . import _tensor as T

log = logging.getLogger("mooncake")

_INVALID = -600
_FILE_NOT_FOUND = -1100


def _fail(what, err):
    log.error("mooncake: %s: %s", what, err)


def _attr(obj, name, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


class _Axis(object):
    """A normalized ParallelAxis."""

    __slots__ = ("kind", "rank", "size", "split_dim", "expert_id", "stage_id")

    def __init__(self, ax):
        self.kind = str(_attr(ax, "kind", "")).upper()
        self.rank = int(_attr(ax, "rank", 0))
        self.size = int(_attr(ax, "size", 1))
        sd = _attr(ax, "split_dim")
        self.split_dim = None if sd is None else int(sd)
        eid, sid = _attr(ax, "expert_id"), _attr(ax, "stage_id")
        self.expert_id = None if eid is None else int(eid)
        self.stage_id = None if sid is None else int(sid)

    def with_rank(self, r):
        a = _Axis(self)
        a.rank = r
        return a


def _axes(parallelism, what):
    axes = [_Axis(a) for a in (_attr(parallelism, "axes", None) or [])]
    T.validate_axes(axes, what)
    return axes


def _tp_index(axes):
    for i, a in enumerate(axes):
        if a.kind == "TP":
            return i
    return None


def _writer(wp, what):
    r, n, sd = int(_attr(wp, "rank", 0)), int(_attr(wp, "size", 1)), int(_attr(wp, "split_dim", 0))
    if n <= 0 or not (0 <= r < n) or sd < 0:
        raise T.TensorError("%s: invalid writer_partition (rank %d of %d, split_dim %d)" % (what, r, n, sd))
    return r, n, sd


def _same_layout(data, n, axes):
    """Whether the stored shard's TP axis (if any) is the one axes ask for."""
    tpi = _tp_index(axes)
    if tpi is None:
        return True
    try:
        h = T.Header.parse(data, n)
    except T.TensorError:
        return True  # not a tensor object: let the decoder report it
    for ax in h.axes:
        if ax[0] == T.AXIS_KINDS["TP"]:
            return ax[3] == axes[tpi].size and ax[4] == axes[tpi].split_dim
    return True


class TensorAPI(object):
    """The tensor half of MooncakeDistributedStore."""

    # --- writing -----------------------------------------------------------

    def _write_objects(self, what, keys, objs, config, upsert):
        """Puts (or upserts) encoded tensor objects (bytearrays, None = invalid); one code per key."""
        out = [_INVALID] * len(keys)
        idx = [i for i, o in enumerate(objs) if o is not None]
        if not idx:
            return out
        if not self._ready(what):
            return out
        ptrs, sizes, keep = [], [], []
        for i in idx:
            buf = (ctypes.c_char * len(objs[i])).from_buffer(objs[i])
            keep.append(buf)
            ptrs.append(ctypes.addressof(buf))
            sizes.append(len(objs[i]))
        res = self._batch(what, [keys[i] for i in idx], ptrs, sizes, config, upsert, False)
        del keep
        for i, rc in zip(idx, res):
            out[i] = int(rc)
        return out

    def _encode(self, what, key, tensor, header=None):
        try:
            ins = T.inspect(tensor, "tensor for %s" % key)
            if header is not None:
                header.data_bytes = ins.nbytes
                ins.header = header
            return T.encode(ins)
        except (T.TensorError, TypeError, ValueError) as e:
            _fail(what, e)
            return None

    def _put_tensors(self, what, keys, tensors, config=None, upsert=False):
        keys = list(keys)
        try:
            tensors = list(tensors)
        except TypeError:
            tensors = None
        if tensors is None or len(keys) != len(tensors):
            _fail(what, "keys and tensors differ in length")
            return [_INVALID] * len(keys)
        if not self._is_set_up(what):
            return [_INVALID] * len(keys)
        objs = [self._encode(what, k, t) for k, t in zip(keys, tensors)]
        return self._write_objects(what, keys, objs, config, upsert)

    def _is_set_up(self, what):
        if not self._h:
            _fail(what, "client is not initialized")
            return False
        return True

    def put_tensor(self, key, tensor):
        """Stores a CPU torch tensor (or numpy array) with its dtype and shape. 0 or negative."""
        return self._put_tensors("put_tensor", [key], [tensor])[0]

    def pub_tensor(self, key, tensor, config=None):
        """put_tensor with a ReplicateConfig."""
        return self._put_tensors("pub_tensor", [key], [tensor], config)[0]

    def upsert_tensor(self, key, tensor):
        """put_tensor, replacing an existing value."""
        return self._put_tensors("upsert_tensor", [key], [tensor], None, True)[0]

    def upsert_pub_tensor(self, key, tensor, config=None):
        return self._put_tensors("upsert_pub_tensor", [key], [tensor], config, True)[0]

    def batch_put_tensor(self, keys, tensors_list):
        """One code per key."""
        return self._put_tensors("batch_put_tensor", keys, tensors_list)

    def batch_pub_tensor(self, keys, tensors_list, config=None):
        return self._put_tensors("batch_pub_tensor", keys, tensors_list, config)

    def batch_upsert_tensor(self, keys, tensors_list):
        return self._put_tensors("batch_upsert_tensor", keys, tensors_list, None, True)

    def batch_upsert_pub_tensor(self, keys, tensors_list, config=None):
        return self._put_tensors("batch_upsert_pub_tensor", keys, tensors_list, config, True)

    # tensor parallel: every rank's shard, under <key>_tp_<rank>

    def _tp_objects(self, what, base_key, tensor, tp_size, split_dim, axes=None, key_of=None):
        """(keys, objs) of the tp_size shards of tensor, or raises TensorError."""
        ins = T.inspect(tensor, "tensor for %s" % base_key)
        full = ins.owner
        gshape = T.shape_of(full)
        keys, objs = [], []
        tpi = _tp_index(axes) if axes else None
        for r in range(tp_size):
            shard = T.narrow(full, split_dim, r, tp_size)
            lshape = T.shape_of(shard)
            if axes:
                shard_axes = list(axes)
                shard_axes[tpi] = axes[tpi].with_rank(r)
            else:
                shard_axes = [_Axis({"kind": "TP", "rank": r, "size": tp_size, "split_dim": split_dim})]
            header = T.shard_header(ins.header.dtype, gshape, lshape, shard_axes)
            keys.append(key_of(shard_axes) if key_of else T.tp_key(base_key, r))
            objs.append(self._encode(what, keys[-1], shard, header))
        return keys, objs

    def _put_tp(self, what, base_keys, tensors, config, tp_size, split_dim, upsert=False, axes_list=None):
        base_keys = list(base_keys)
        tensors = list(tensors) if tensors is not None else None
        if tensors is None or len(base_keys) != len(tensors):
            _fail(what, "keys and tensors differ in length")
            return [_INVALID] * len(base_keys)
        if not self._is_set_up(what):
            return [_INVALID] * len(base_keys)
        out = [_INVALID] * len(base_keys)
        all_keys, all_objs, owner = [], [], []
        for i, (k, t) in enumerate(zip(base_keys, tensors)):
            try:
                axes = axes_list[i] if axes_list else None
                sd = axes[_tp_index(axes)].split_dim if axes else split_dim
                n = axes[_tp_index(axes)].size if axes else tp_size
                key_of = (lambda ax, k=k: T.parallelism_key(k, ax)) if axes else None
                keys, objs = self._tp_objects(what, k, t, n, sd, axes, key_of)
            except (T.TensorError, TypeError, ValueError, AttributeError) as e:
                _fail(what, e)
                continue
            if any(o is None for o in objs):
                continue
            all_keys.extend(keys)
            all_objs.extend(objs)
            owner.extend([i] * len(keys))
        res = self._write_objects(what, all_keys, all_objs, config, upsert)
        for i in sorted(set(owner)):
            codes = [rc for rc, o in zip(res, owner) if o == i]
            out[i] = next((rc for rc in codes if rc != 0), 0)
        return out

    def put_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0):
        """Splits tensor along split_dim into tp_size equal shards stored as key_tp_<rank>. 0 or negative."""
        if tp_size <= 1:
            return self.put_tensor(key, tensor)
        return self._put_tp("put_tensor_with_tp", [key], [tensor], None, tp_size, split_dim)[0]

    def pub_tensor_with_tp(self, key, tensor, config=None, tp_rank=0, tp_size=1, split_dim=0):
        if tp_size <= 1:
            return self.pub_tensor(key, tensor, config)
        return self._put_tp("pub_tensor_with_tp", [key], [tensor], config, tp_size, split_dim)[0]

    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1, split_dim=0):
        if tp_size <= 1:
            return self.batch_put_tensor(base_keys, tensors_list)
        return self._put_tp("batch_put_tensor_with_tp", base_keys, tensors_list, None, tp_size, split_dim)

    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank=0, tp_size=1, split_dim=0):
        if tp_size <= 1:
            return self.batch_pub_tensor(base_keys, tensors_list, config)
        return self._put_tp("batch_pub_tensor_with_tp", base_keys, tensors_list, config, tp_size, split_dim)

    # from buffers holding [header][data]

    def _view(self, what, ptr, size):
        """The tensor in [ptr, +size) (a validated object), or raises TensorError."""
        if not ptr or size < T.HEADER_SIZE:
            raise T.TensorError("%s: buffer is null or smaller than the tensor header" % what)
        return T.decode_at(int(ptr), int(size))  # device memory: read with the driver

    def _put_from(self, what, keys, ptrs, sizes, upsert=False, config=None):
        keys = list(keys)
        if not (len(keys) == len(ptrs) == len(sizes)):
            _fail(what, "keys, buffer_ptrs and sizes differ in length")
            return [_INVALID] * len(keys)
        if not self._is_set_up(what):
            return [_INVALID] * len(keys)
        ok_keys, ok_ptrs, ok_sizes, idx = [], [], [], []
        for i, (k, p, n) in enumerate(zip(keys, ptrs, sizes)):
            try:
                self._view(what, p, n)
            except (T.TensorError, ValueError) as e:
                _fail(what, e)
                continue
            ok_keys.append(k)
            ok_ptrs.append(int(p))
            ok_sizes.append(int(n))
            idx.append(i)
        out = [_INVALID] * len(keys)
        if ok_keys:
            for i, rc in zip(idx, self._batch(what, ok_keys, ok_ptrs, ok_sizes, config, upsert, False)):
                out[i] = int(rc)
        return out

    def put_tensor_from(self, key, buffer_ptr, size):
        """Stores the [header][data] object in [buffer_ptr, +size). 0 or negative."""
        return self._put_from("put_tensor_from", [key], [buffer_ptr], [size])[0]

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        return self._put_from("batch_put_tensor_from", keys, buffer_ptrs, sizes)

    def upsert_tensor_from(self, key, buffer_ptr, size):
        return self._put_from("upsert_tensor_from", [key], [buffer_ptr], [size], True)[0]

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        return self._put_from("batch_upsert_tensor_from", keys, buffer_ptrs, sizes, True)

    def _tp_from(self, what, base_keys, ptrs, sizes, tp_size, split_dim):
        base_keys = list(base_keys)
        if not (len(base_keys) == len(ptrs) == len(sizes)):
            _fail(what, "keys, buffer_ptrs and sizes differ in length")
            return [_INVALID] * len(base_keys)
        tensors = []
        for p, n in zip(ptrs, sizes):
            try:
                tensors.append(self._view(what, p, n))
            except (T.TensorError, ValueError) as e:
                _fail(what, e)
                tensors.append(None)
        return self._put_tp(what, base_keys, tensors, None, tp_size, split_dim)

    def put_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """Splits the full tensor object in the buffer into key_tp_<rank> shards. 0 or negative."""
        if tp_size <= 1:
            return self.put_tensor_from(key, buffer_ptr, size)
        return self._tp_from("put_tensor_with_tp_from", [key], [buffer_ptr], [size], tp_size, split_dim)[0]

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1, split_dim=0):
        if tp_size <= 1:
            return self.batch_put_tensor_from(base_keys, buffer_ptrs, sizes)
        return self._tp_from("batch_put_tensor_with_tp_from", base_keys, buffer_ptrs, sizes, tp_size, split_dim)

    # --- reading -------------------------------------------------------------

    def _decode_value(self, what, key, rc, data):
        if rc < 0:
            if rc != -704:
                _fail(what, "get %s failed: %d" % (key, rc))
            return None
        try:
            return T.decode(bytearray(data), rc)
        except (T.TensorError, ValueError) as e:
            _fail(what, "%s: %s" % (key, e))
            return None

    def get_tensor(self, key):
        """The tensor stored under key (a torch tensor, numpy without torch), or None."""
        if not self._is_set_up("get_tensor"):
            return None
        rc, data = self._get_rc(key)
        return self._decode_value("get_tensor", key, rc, data)

    def batch_get_tensor(self, keys):
        if not self._is_set_up("batch_get_tensor"):
            return [None] * len(keys)
        return [self.get_tensor(k) for k in keys]

    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        """This rank's shard (key_tp_<tp_rank>), or the whole tensor when tp_size <= 1."""
        if tp_size <= 1:
            return self.get_tensor(key)
        return self.get_tensor(T.tp_key(key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        if tp_size <= 1:
            return self.batch_get_tensor(base_keys)
        return self.batch_get_tensor([T.tp_key(k, tp_rank) for k in base_keys])

    def _tensor_at(self, what, ptr, n):
        if n < 0:
            if n != -704:
                _fail(what, "get into failed: %d" % n)
            return None
        try:
            return T.decode_at(int(ptr), int(n))
        except (T.TensorError, ValueError) as e:
            _fail(what, e)
            return None

    def get_tensor_into(self, key, buffer_ptr, size):
        """Reads the object into [buffer_ptr, +size); a tensor viewing the buffer, or None."""
        if not self._is_set_up("get_tensor_into"):
            return None
        if not buffer_ptr:
            _fail("get_tensor_into", "buffer pointer cannot be null")
            return None
        return self._tensor_at("get_tensor_into", buffer_ptr, self.get_into(key, buffer_ptr, size))

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        """A tensor (viewing its buffer) or None per key; [-600]*n on bad arguments."""
        what = "batch_get_tensor_into"
        keys = list(keys)
        if not self._is_set_up(what):
            return [_INVALID] * len(keys)
        if not (len(keys) == len(buffer_ptrs) == len(sizes)) or any(not p for p in buffer_ptrs):
            _fail(what, "keys, buffer_ptrs and sizes must have the same length, pointers non-null")
            return [_INVALID] * len(keys)
        res = self.batch_get_into(keys, buffer_ptrs, sizes)
        return [self._tensor_at(what, p, n) for p, n in zip(buffer_ptrs, res)]

    def get_tensor_with_tp_into(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        if tp_size <= 1:
            return self.get_tensor_into(key, buffer_ptr, size)
        return self.get_tensor_into(T.tp_key(key, tp_rank), buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1):
        if not self._is_set_up("batch_get_tensor_with_tp_into"):
            return [None] * len(base_keys)
        if tp_size <= 1:
            return self.batch_get_tensor_into(base_keys, buffer_ptrs, sizes)
        return self.batch_get_tensor_into([T.tp_key(k, tp_rank) for k in base_keys], buffer_ptrs, sizes)

    def get_tensor_into_cuda(self, key, tensor):
        """Reads the tensor stored under key into an existing CUDA tensor of the same dtype and
        size (its data only). Bytes read, or negative. The object is read and checked in host
        memory, then copied to the device."""
        return self.batch_get_tensor_into_cuda([key], [tensor])[0]
        return _INVALID

    def batch_get_tensor_into_cuda(self, keys, tensors_list):
        what = "batch_get_tensor_into_cuda"
        keys = list(keys)
        tensors = list(tensors_list) if tensors_list is not None else []
        out = [_INVALID] * len(keys)
        if not self._is_set_up(what):
            return out
        if len(keys) != len(tensors):
            _fail(what, "keys and tensors differ in length")
            return out
        if not _cuda.supported():
            _fail(what, "no CUDA device (SUPPORT_CUDA is False)")
            return out
        for i, (k, t) in enumerate(zip(keys, tensors)):
            try:
                ptr, nbytes = int(t.data_ptr()), int(t.numel() * t.element_size())
                if not t.is_contiguous() or (nbytes and _cuda.device_of(ptr) < 0):
                    raise T.TensorError("destination for %s is not a contiguous CUDA tensor" % k)
            except (AttributeError, T.TensorError) as e:
                _fail(what, e)
                continue
            rc, data = self._get_rc(k)
            if rc < 0:
                if rc != -704:
                    _fail(what, "get %s failed: %d" % (k, rc))
                out[i] = rc
                continue
            try:
                h = T.Header.parse(data, rc)
                if h.data_bytes != nbytes or T.dtype_code(t) != h.dtype:
                    raise T.TensorError("%s: stored tensor (%d bytes, dtype %d) does not fit the destination "
                                        "(%d bytes, dtype %d)" % (k, h.data_bytes, h.dtype, nbytes, T.dtype_code(t)))
                if nbytes:
                    _cuda.from_host(ptr, bytes(data[h.data_offset:h.data_offset + nbytes]))
            except (T.TensorError, ValueError, OSError) as e:
                _fail(what, e)
                continue
            out[i] = nbytes
        return out

    # --- parallelism descriptors ----------------------------------------------

    def _resolve_write(self, what, parallelism, writer_partition):
        """("full", None) | ("tp", axes) | ("generic", axes) | ("writer", (r, n, sd))."""
        if writer_partition is not None:
            if parallelism is not None:
                raise T.TensorError("%s: writer_partition cannot be combined with parallelism" % what)
            return "writer", _writer(writer_partition, what)
        if parallelism is None:
            return "full", None
        axes = _axes(parallelism, what)
        return ("tp" if _tp_index(axes) is not None else "generic"), axes

    def _put_parallel(self, what, keys, tensors, parallelisms, config, writer_partitions, upsert, whole_tp=False):
        keys = list(keys)
        n = len(keys)
        tensors = list(tensors) if tensors is not None else None
        if tensors is None or len(tensors) != n:
            _fail(what, "keys and tensors differ in length")
            return [_INVALID] * n
        for name, lst in (("parallelisms", parallelisms), ("writer_partitions", writer_partitions)):
            if lst is not None and len(lst) != n:
                _fail(what, "%s must have one entry per key" % name)
                return [_INVALID] * n
        if not self._is_set_up(what):
            return [_INVALID] * n
        out = [_INVALID] * n
        for i in range(n):
            p = parallelisms[i] if parallelisms is not None else None
            w = writer_partitions[i] if writer_partitions is not None else None
            try:
                route, spec = self._resolve_write(what, p, w)
                if route == "tp" and whole_tp:
                    # from a buffer, a TP layout stores every rank's shard of the whole tensor
                    out[i] = self._put_tp(what, [keys[i]], [tensors[i]], config, 0, 0, upsert, [spec])[0]
                else:
                    out[i] = self._put_one_parallel(what, keys[i], tensors[i], route, spec, config, upsert)
            except (T.TensorError, TypeError, ValueError, AttributeError) as e:
                _fail(what, e)
        return out

    def _put_shard(self, what, key, obj_key, shard, dtype, gshape, axes, config, upsert, manifest):
        """Writes one shard object and (manifest = (key, body)) the manifest beside it."""
        h = T.shard_header(dtype, gshape, T.shape_of(shard), axes)
        rc = self._write_objects(what, [obj_key], [self._encode(what, obj_key, shard, h)], config, upsert)[0]
        if rc != 0 or manifest is None:
            return rc
        # every writer of the set (re)writes the manifest: an upsert, so the last one wins
        return self._write_objects(what, [manifest[0]], [manifest[1]], config, True)[0]

    def _put_one_parallel(self, what, key, tensor, route, spec, config, upsert):
        if route == "full":
            return self._put_tensors(what, [key], [tensor], config, upsert)[0]
        ins = T.inspect(tensor, "tensor for %s" % key)
        dtype, shape = ins.header.dtype, T.shape_of(ins.owner)
        if route == "writer":
            # the caller holds the whole tensor; this writer stores its chunk
            r, cnt, sd = spec
            if sd >= len(shape):
                raise T.TensorError("%s: split_dim %d out of range" % (what, sd))
            P.require_uniform(shape, sd, cnt, what)
            shard = P.chunk(ins.owner, sd, r, cnt)
            ax = _Axis({"kind": "TP", "rank": r, "size": cnt, "split_dim": sd})
            man = (P.writer_manifest_key(key), P.encode_manifest("writer", shape, dtype, writer=spec))
            return self._put_shard(what, key, T.writer_key(key, r, cnt, sd), shard, dtype, shape, [ax], config,
                                   upsert, man)
        if route == "tp":
            tp = spec[_tp_index(spec)]
            if tp.split_dim >= len(shape):
                raise T.TensorError("%s: split_dim %d out of range" % (what, tp.split_dim))
            if len(spec) == 1:
                # a single TP axis: the tensor is this rank's shard
                shard, gshape = ins.owner, list(shape)
                gshape[tp.split_dim] *= tp.size
            else:
                # TP among other axes: the tensor is the whole one, this rank's chunk is stored
                P.require_uniform(shape, tp.split_dim, tp.size, what)
                shard, gshape = P.chunk(ins.owner, tp.split_dim, tp.rank, tp.size), shape
            man = (P.manifest_key(key), P.encode_manifest("parallelism", gshape, dtype, axes=spec))
            return self._put_shard(what, key, T.parallelism_key(key, spec), shard, dtype, gshape, spec, config,
                                   upsert, man)
        # axes without TP tag the object; its bytes are the tensor as given
        return self._put_shard(what, key, T.parallelism_key(key, spec), ins.owner, dtype, shape, spec, config,
                               upsert, None)

    def put_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None, writer_partition=None):
        """Stores tensor as described by a TensorParallelism (every shard of a TP axis, or this
        shard under its axes' key) or a writer_partition (this writer's shard); without either,
        as put_tensor. 0 or negative."""
        return self._put_parallel("put_tensor_with_parallelism", [key], [tensor],
                                  None if parallelism is None else [parallelism], config,
                                  None if writer_partition is None else [writer_partition], False)[0]

    def batch_put_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None, config=None,
                                          writer_partitions=None):
        return self._put_parallel("batch_put_tensor_with_parallelism", keys, tensors_list, parallelisms, config,
                                  writer_partitions, False)

    def upsert_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None, writer_partition=None):
        return self._put_parallel("upsert_tensor_with_parallelism", [key], [tensor],
                                  None if parallelism is None else [parallelism], config,
                                  None if writer_partition is None else [writer_partition], True)[0]

    def batch_upsert_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None, config=None,
                                             writer_partitions=None):
        return self._put_parallel("batch_upsert_tensor_with_parallelism", keys, tensors_list, parallelisms,
                                  config, writer_partitions, True)

    def _views(self, what, ptrs, sizes):
        out = []
        for p, n in zip(ptrs, sizes):
            try:
                out.append(self._view(what, p, n))
            except (T.TensorError, ValueError) as e:
                _fail(what, e)
                out.append(None)
        return out

    def put_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None, config=None,
                                         writer_partition=None):
        return self.batch_put_tensor_with_parallelism_from(
            [key], [buffer_ptr], [size], None if parallelism is None else [parallelism], config,
            None if writer_partition is None else [writer_partition])[0]

    def batch_put_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None, config=None,
                                               writer_partitions=None):
        return self._put_parallel_from("batch_put_tensor_with_parallelism_from", keys, buffer_ptrs, sizes,
                                       parallelisms, config, writer_partitions, False)

    def upsert_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None, config=None,
                                            writer_partition=None):
        return self.batch_upsert_tensor_with_parallelism_from(
            [key], [buffer_ptr], [size], None if parallelism is None else [parallelism], config,
            None if writer_partition is None else [writer_partition])[0]

    def batch_upsert_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None, config=None,
                                                  writer_partitions=None):
        return self._put_parallel_from("batch_upsert_tensor_with_parallelism_from", keys, buffer_ptrs, sizes,
                                       parallelisms, config, writer_partitions, True)

    def _put_parallel_from(self, what, keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, upsert):
        if not (len(keys) == len(buffer_ptrs) == len(sizes)):
            _fail(what, "keys, buffer_ptrs and sizes differ in length")
            return [_INVALID] * len(keys)
        return self._put_parallel(what, keys, self._views(what, buffer_ptrs, sizes), parallelisms, config,
                                  writer_partitions, upsert, whole_tp=True)

    def _read_parallel(self, what, key, target):
        """The tensor a ReadTarget asks for, or None."""
        mode = str(_attr(target, "mode", "as_stored") if target is not None else "as_stored").lower()
        if mode not in ("as_stored", "shard", "full"):
            raise T.TensorError("%s: unknown read mode %r" % (what, mode))
        parallelism = _attr(target, "parallelism") if target is not None else None
        axes = _axes(parallelism, what) if parallelism is not None and _attr(parallelism, "axes") else None
        if mode == "full":
            return self._read_full(what, key, axes)
        if axes is None:
            if mode == "shard":
                raise T.TensorError("%s: mode 'shard' needs a parallelism" % what)
            return self.get_tensor(key)
        t = self._read_stored_shard(key, axes)
        if t is not None:
            return t
        tpi = _tp_index(axes)
        if tpi is None:
            return None
        # no object for this shard (another TP size wrote the set): cut it from the whole tensor,
        # when the set is complete and splits evenly into the requested shards
        full = self._read_full(what, key, axes, complete=True)
        if full is None:
            return None
        tp = axes[tpi]
        shape = T.shape_of(full)
        if tp.split_dim >= len(shape) or shape[tp.split_dim] % tp.size:
            _fail(what, "%s: dim %d of the stored tensor does not split evenly into %d" % (
                key, tp.split_dim, tp.size))
            return None
        return P.chunk(full, tp.split_dim, tp.rank, tp.size)

    def _get_object(self, key):
        """(rc, data) of key, rc -704 when absent."""
        return self._get_rc(key)

    def _read_stored_shard(self, key, axes):
        """The stored object of exactly this shard (its key, or a writer partition's), or None."""
        rc, data = self._get_object(T.parallelism_key(key, axes))
        if rc == -704 and len(axes) == 1 and axes[0].kind == "TP":
            a = axes[0]
            rc, data = self._get_object(T.writer_key(key, a.rank, a.size, a.split_dim))
        if rc == -704:
            return None
        if rc >= 0 and not _same_layout(data, rc, axes):
            return None
        return self._decode_value("get_tensor_with_parallelism", key, rc, data)

    def _manifest(self, key):
        for mk in (P.manifest_key(key), P.writer_manifest_key(key)):
            rc, data = self._get_object(mk)
            if rc >= 0:
                doc = P.decode_manifest(data, rc)
                if doc is not None:
                    return doc
        return None

    def _gather(self, what, keys, split_dim):
        """The shards under keys joined along split_dim; a missing key past the first ends the set."""
        parts = []
        for k in keys:
            rc, data = self._get_object(k)
            if rc == -704 and parts:
                break
            t = self._decode_value(what, k, rc, data)
            if t is None:
                return None
            parts.append(t)
        return T.cat(parts, split_dim) if len(parts) > 1 else parts[0]

    def _read_full(self, what, key, axes, complete=False):
        """The whole tensor: gathered from the shards its writers recorded in a manifest, from
        the TP shards axes name, or the plain object under key."""
        doc = self._manifest(key)
        if doc is not None and doc.get("kind") == "writer":
            n, sd = int(doc["writer"]["size"]), int(doc["writer"]["split_dim"])
            return self._gather(what, [T.writer_key(key, r, n, sd) for r in range(n)], sd)
        template = None
        if doc is not None and doc.get("axes"):
            template = [_Axis(a) for a in doc["axes"]]
            if axes is not None and sorted(a.kind for a in axes) == sorted(a.kind for a in template):
                # the caller's ranks of the other axes pick which set (e.g. which DP replica)
                ranks = {a.kind: a for a in axes}
                template = [a if a.kind == "TP" else ranks[a.kind] for a in template]
        elif axes is not None:
            template = axes
        if template is None:
            return self.get_tensor(key)
        tpi = _tp_index(template)
        if tpi is None:
            t = self._read_stored_shard(key, template)
            return t
        tp = template[tpi]
        keys = []
        for r in range(tp.size):
            shard_axes = list(template)
            shard_axes[tpi] = tp.with_rank(r)
            keys.append(T.parallelism_key(key, shard_axes))
        full = self._gather(what, keys, tp.split_dim)
        if complete and full is not None and doc is not None and list(T.shape_of(full)) != list(doc["shape"]):
            return None  # shards of the set are missing
        return full

    def get_tensor_with_parallelism(self, key, target=None):
        """The tensor a ReadTarget describes (as stored, one shard, or the full tensor
        gathered from its TP shards), or None."""
        if not self._is_set_up("get_tensor_with_parallelism"):
            return None
        try:
            return self._read_parallel("get_tensor_with_parallelism", key, target)
        except (T.TensorError, TypeError, ValueError, AttributeError) as e:
            _fail("get_tensor_with_parallelism", e)
            return None

    def batch_get_tensor_with_parallelism(self, keys, targets=None):
        if targets is not None and len(targets) != len(keys):
            _fail("batch_get_tensor_with_parallelism", "targets must have one entry per key")
            return [None] * len(keys)
        return [self.get_tensor_with_parallelism(k, None if targets is None else targets[i])
                for i, k in enumerate(keys)]

    def get_tensor_with_parallelism_into(self, key, buffer_ptr, size, target=None):
        """As get_tensor_with_parallelism, written to [buffer_ptr, +size) as a tensor object;
        a tensor viewing the buffer, or None."""
        what = "get_tensor_with_parallelism_into"
        t = self.get_tensor_with_parallelism(key, target)
        if t is None or not buffer_ptr:
            return None
        try:
            obj = T.encode(T.inspect(t))
        except T.TensorError as e:
            _fail(what, e)
            return None
        if len(obj) > int(size):
            _fail(what, "buffer of %d bytes is too small for %d" % (size, len(obj)))
            return None
        ctypes.memmove(int(buffer_ptr), (ctypes.c_char * len(obj)).from_buffer(obj), len(obj))
        return self._tensor_at(what, buffer_ptr, len(obj))

    def batch_get_tensor_with_parallelism_into(self, keys, buffer_ptrs, sizes, targets=None):
        n = len(keys)
        if not (n == len(buffer_ptrs) == len(sizes)) or (targets is not None and len(targets) != n):
            _fail("batch_get_tensor_with_parallelism_into", "argument lists differ in length")
            return [_INVALID] * n
        return [self.get_tensor_with_parallelism_into(keys[i], buffer_ptrs[i], sizes[i],
                                                      None if targets is None else targets[i])
                for i in range(n)]

    # --- safetensors -----------------------------------------------------------

    def save_tensor_to_safetensor(self, key, file_name=None):
        """Writes the tensor under key to a safetensors file (named key by default). 0 or negative."""
        if not self._is_set_up("save_tensor_to_safetensor"):
            return _INVALID
        t = self.get_tensor(key)
        if t is None:
            _fail("save_tensor_to_safetensor", "no tensor under %s" % key)
            return _FILE_NOT_FOUND
        try:
            T.save_safetensors({str(key): t}, key if file_name is None else str(file_name))
            return 0
        except (OSError, T.TensorError, KeyError) as e:
            _fail("save_tensor_to_safetensor", e)
            return _INVALID

    def load_tensor_from_safetensor(self, key=None, file_name=None):
        """Loads a tensor from a safetensors file (the entry named key, else the first) and
        stores it under key (file_name by default); the tensor, or None."""
        what = "load_tensor_from_safetensor"
        if file_name is None:
            raise TypeError("load_tensor_from_safetensor() missing required argument: 'file_name'")
        if not self._is_set_up(what):
            return None
        try:
            loaded = T.load_safetensors(str(file_name))
        except (OSError, ValueError, KeyError, T.TensorError) as e:
            _fail(what, e)
            return None
        if not loaded:
            _fail(what, "no tensors in %s" % file_name)
            return None
        store_key = str(file_name) if key is None else str(key)
        if key is not None and store_key in loaded:
            t = loaded[store_key]
        else:
            if key is not None:
                log.warning("mooncake: %s: %s not in %s; using its first tensor", what, store_key, file_name)
            t = next(iter(loaded.values()))
        rc = self.put_tensor(store_key, t)
        if rc != 0:
            _fail(what, "put %s: %d" % (store_key, rc))
            return None
        return t
