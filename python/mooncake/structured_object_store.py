"""mooncake.structured_object_store: Mooncake's bundle transfer of structured objects and DataProtos.

A **bundle** is metadata bytes plus named buffers, each buffer stored under its own keys
(``<prefix>/<partition>/<uuid>/buffer/<name>``, split into ``/chunk/<i>`` keys past
``chunk_bytes``) and found through a JSON manifest (``.../manifest``). A **structured
object** is a bundle whose metadata is JSON with one spec per member (``ndarray`` with
dtype and shape, ``torch_tensor``, ``bytes``), so members read back typed, whole, sliced
along axis 0, by row indexes, or into caller buffers (numpy arrays, ``raw_destination``,
``tensor_object_buffer``). A **DataProto** (``batch`` tensors/arrays, ``non_tensor_batch``
object columns, ``meta_info``) is one structured object per stage; object columns are
encoded by inferred codecs (numbers, ragged numeric rows, ragged tensors, bytes, strings,
media, msgpack, JSON, nested dicts/lists) or by ``FieldSchema``; the ``MooncakeDataProtoRef``
it returns (exportable as a JSON handle) reads any subset of fields and rows back.

``MooncakeBundleTransfer(store, key_prefix="bundle", default_chunk_bytes=64 MiB,
buffer_pool=None)`` works over any store with ``put``/``get``/``remove`` and uses the
zero-copy calls of ``MooncakeDistributedStore`` where the store has them (``batch_put_from``
from ``BufferPool`` leases, ``put_tensor``/``pub_tensor``, ``put_tensor_from``, ``get_into``,
``get_into_ranges``, ``batch_get_into``, ``batch_remove``). A failed put removes what it
wrote. ``config.group_ids`` (one logical group) is spread over every key a write makes; a
DataProto without one gets an opaque ``structured-<hex>`` storage group.

Names, signatures, manifest and metadata layout, codec payloads and errors are Mooncake's
(``mooncake-wheel/mooncake/structured_object_store.py``); the byte layer is in
``_bundle_io``, the plain data types in ``_structured_types``.
"""

import copy
import ctypes
import io
import json
import struct
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as _np

try:
    import torch as _torch
except Exception:  # pragma: no cover - torch is optional
    _torch = None

try:
    import msgpack as _msgpack
except ImportError:  # pragma: no cover - the msgpack codec needs it
    _msgpack = None

try:
    from . import store as _mooncake_store
except Exception:  # pragma: no cover - the native library is missing
    _mooncake_store = None

try:
    from ._fast_copy import concat_arrays_into as _concat_arrays_into
except Exception:  # pragma: no cover
    _concat_arrays_into = None

from ._bundle_io import (AUTO_PARALLEL_MIN_BYTES, AUTO_PARALLEL_MIN_CHUNKS, DEFAULT_BUNDLE_CHUNK_BYTES,  # noqa: F401
                         MISSING_OBJECT_ERROR, _GROUP_ERROR, _DirectCopyPayload, _MultiBufferPayload,
                         _PayloadTransport, _PoolBackedNdarray, _PoolLeaseOwner, _RawDestinationBuffer,
                         _TensorObjectBufferPayload, _TensorPayload, _array_at, _batch_put_from_with_config,
                         _buffer_nbytes, _bytes_view, _check_status, _cleanup_keys, _config_for_grouped_keys,
                         _config_with_group_id, _copy_write_config, _group_nbytes, _nbytes_of, _put_with_config,
                         _split_buffers, _split_view, raw_destination, tensor_object_buffer)
from ._structured_types import *  # noqa: F401,F403
from ._structured_types import __all__ as _types_all
from ._structured_types import (BundleTransferPolicy, FieldSchema, MooncakeDataProtoRef, RemoteBundleRef,
                                StructuredFieldLocation, StructuredMemberSlice, StructuredObjectPayload,
                                StructuredObjectReadSpec, StructuredObjectResult, import_dataproto_ref,
                                is_dataproto_ref_handle)

__all__ = ["MISSING", "MISSING_OBJECT_ERROR", "STRUCTURED_FIELD_SPECS_KEY", "DEFAULT_BUNDLE_CHUNK_BYTES",
           "MooncakeBundleTransfer", "tensor_object_buffer", "raw_destination", "infer_structure"] + list(_types_all)

STRUCTURED_FIELD_SPECS_KEY = "__mooncake_structured_fields__"

# Limits of the expansion (Mooncake's values): a dict column with more keys, or a list
# column with longer lists, is a leaf; deeper nesting is an error.
_INFER_MAX_STRUCT_KEYS = 64
_INFER_MAX_LIST_LEN = 8
_INFER_MAX_SAMPLE_ROWS = 128
_INFER_MAX_JSON_BYTES = 1 << 20
_INFER_MAX_DEPTH = 32


class _Missing(object):
    """The value of a dict key a row does not have (not the same as a ``None`` value)."""

    __slots__ = ()

    def __repr__(self):
        return "<MISSING>"

    def __reduce__(self):
        return "MISSING"


MISSING = _Missing()


@dataclass
class _CodecDecision:
    accepted: bool
    codec: str
    reason: str
    normalized_type: str
    metadata: dict = field(default_factory=dict)


@dataclass
class _InferredLeaf:
    path: str
    values: list
    decision: _CodecDecision


@dataclass
class _InferredNode:
    path: str
    node_type: str  # "dict" or "list"
    children: list  # sorted keys of a dict node, indexes of a list node
    lengths: Optional[list] = None  # a list node's length per row (0 where the row has no list)
    row_mask: Optional[list] = None  # which rows hold a container at this node


def _present(values):
    """The values that are neither None nor MISSING."""
    return [v for v in values if v is not None and v is not MISSING]


def _is_bytes_like(v):
    return isinstance(v, (bytes, bytearray, memoryview))


def _is_pil_image(v):
    mod = getattr(type(v), "__module__", "") or ""
    return mod.startswith("PIL.") and hasattr(v, "save")


def _is_media_list(v):
    return isinstance(v, (list, tuple)) and all(_is_pil_image(x) or _is_bytes_like(x) for x in v)


def _is_number(v):
    return isinstance(v, (bool, int, float)) or (_np is not None and isinstance(v, _np.number))


def _is_tensor(v):
    return _torch is not None and isinstance(v, _torch.Tensor)


def _numeric_dtype(dtype):
    return _np is not None and _np.issubdtype(dtype, _np.number)


def _choose_leaf_codec(values: list) -> _CodecDecision:
    """How a leaf column would be encoded: the first rule that every present value meets."""
    vals = _present(values)
    if not vals:
        return _CodecDecision(False, "msgpack_ragged", "all rows are null", "msgpack")
    if all(_is_tensor(v) for v in vals):
        dtypes = sorted({str(v.dtype) for v in vals})
        if len(dtypes) > 1:
            return _CodecDecision(False, "ragged_tensor", "mixed tensor dtype: %s" % dtypes, "torch.Tensor")
        return _CodecDecision(True, "ragged_tensor", "all non-null rows are Tensor", "torch.Tensor",
                              {"dtype": dtypes[0]})
    if all(_is_media_list(v) for v in vals):
        return _CodecDecision(True, "media_list_ragged", "all rows are media lists", "media list")
    if _np is not None and all(isinstance(v, _np.ndarray) for v in vals):
        if all(_numeric_dtype(v.dtype) for v in vals):
            return _CodecDecision(True, "typed_ragged", "all rows are numeric ndarray", "numeric sequence",
                                  {"recursive_source": "ndarray"})
        return _CodecDecision(False, "msgpack_ragged", "object ndarray rows", "python object")
    if _np is not None and all(isinstance(v, (list, tuple)) for v in vals):
        try:
            common = _np.result_type(*[_np.asarray(v).dtype for v in vals])
        except (TypeError, ValueError, OverflowError):
            common = None
        if common is not None and _numeric_dtype(common):
            return _CodecDecision(True, "typed_ragged", "all rows are numeric sequences", "numeric sequence",
                                  {"dtype": str(common)})
    if all(_is_number(v) for v in vals):
        dtype = str(_np.result_type(*vals)) if _np is not None else type(vals[0]).__name__
        return _CodecDecision(True, "ndarray", "all rows are numeric scalar", "numeric scalar", {"dtype": dtype})
    if all(_is_bytes_like(v) for v in vals):
        return _CodecDecision(True, "bytes_ragged", "all rows are bytes-like", "bytes-like")
    if all(_is_pil_image(v) for v in vals):
        return _CodecDecision(True, "media_bytes", "all rows are media", "media")
    if all(isinstance(v, str) for v in vals):
        return _CodecDecision(True, "utf8_ragged", "all rows are str", "str")
    if all(isinstance(v, (dict, list, tuple)) for v in vals):
        return _CodecDecision(True, "msgpack_ragged", "all rows are msgpack-like", "msgpack")
    return _CodecDecision(False, "msgpack_ragged", "no codec matched", "python object")


def _escape_key(key: str) -> str:
    """A dict key as one path component: backslashes, dots and brackets escaped."""
    out = []
    for ch in key:
        if ch in "\\.[":
            out.append("\\")
        out.append(ch)
    return "".join(out)


def _dict_keys(values):
    """The sorted keys of a column whose present values are all dicts with str keys (None otherwise)."""
    vals = _present(values)
    if not vals or not all(isinstance(v, dict) for v in vals):
        return None
    keys = set()
    for v in vals:
        keys.update(v)
    if len(keys) > _INFER_MAX_STRUCT_KEYS or not all(isinstance(k, str) for k in keys):
        return None
    return sorted(keys)


def _list_shape(values):
    """(longest, lengths) of a column of short lists of containers (None otherwise)."""
    vals = _present(values)
    if not vals or not all(isinstance(v, (list, tuple)) for v in vals):
        return None
    longest = max(len(v) for v in vals)
    if longest > _INFER_MAX_LIST_LEN:
        return None
    for v in vals:
        for item in v:
            if item is not None and not isinstance(item, (dict, list, tuple)):
                return None
    return longest, [len(v) if isinstance(v, (list, tuple)) else 0 for v in values]


def infer_structure(path: str, values: list, leaves: list, nodes: list, *, _depth: int = 0) -> None:
    """Expands a column of row values into nodes (appended to ``nodes``) and leaves (to
    ``leaves``): a column of dicts becomes a dict node with one child column per key, a column
    of short lists of containers a list node with one child column per index; anything else
    is a leaf with its codec decision. Raises ValueError past the depth limit."""
    if _depth > _INFER_MAX_DEPTH:
        raise ValueError("infer_structure: %r is nested deeper than %d levels" % (path, _INFER_MAX_DEPTH))
    keys = _dict_keys(values)
    if keys is not None:
        nodes.append(_InferredNode(path, "dict", keys, row_mask=[isinstance(v, dict) for v in values]))
        for k in keys:
            column = [v.get(k, MISSING) if isinstance(v, dict) else None for v in values]
            infer_structure("%s.%s" % (path, _escape_key(k)), column, leaves, nodes, _depth=_depth + 1)
        return
    shape = _list_shape(values)
    if shape is not None:
        longest, lengths = shape
        is_list = [isinstance(v, (list, tuple)) for v in values]
        nodes.append(_InferredNode(path, "list", list(range(longest)), lengths, row_mask=is_list))
        for i in range(longest):
            column = []
            for v, ok in zip(values, is_list):
                if not ok:
                    column.append(None)
                else:
                    column.append(v[i] if i < len(v) else MISSING)
            infer_structure("%s[%d]" % (path, i), column, leaves, nodes, _depth=_depth + 1)
        return
    leaves.append(_InferredLeaf(path, list(values), _choose_leaf_codec(values)))




# ---------------------------------------------------------------------------
# Column codecs of non-tensor fields
# ---------------------------------------------------------------------------
#
# A column (one value per row) is encoded as named payload arrays plus JSON metadata, each
# payload stored as one member of the stage's structured object. Payload names per codec:
#   ndarray            data (the values), nulls
#   typed_ragged       data (all rows' elements, flat), offsets (rows+1), shapes, ndims, nulls
#   ragged_tensor      as typed_ragged, metadata dtype a torch dtype
#   ragged_tensor_dict null_mask plus "<key>.<ragged_tensor payload>" per dict key
#   bytes_ragged / utf8_ragged / json_ragged / media_bytes / msgpack_ragged
#                      data (rows' bytes back to back), offsets (rows+1), nulls
#   media_list_ragged  data, row_offsets, byte_offsets, nulls
#   structured_recursive  node.<i>.{missing,row_mask,lengths} and leaf.<j>.<payload>

_TYPED_RAGGED_DEFAULT_DTYPE = "int64"
_RAGGED_TENSOR_DEFAULT_DTYPE = "torch.float32"
_ENCODING_FALLBACK_ERRORS = (TypeError, ValueError, OverflowError, RuntimeError, RecursionError)
_RAGGED_TENSOR_PAYLOAD_NAMES = frozenset({"data", "offsets", "shapes", "ndims", "nulls"})


@dataclass
class _EncodedStructuredLeaf:
    codec: str
    rows: int
    payload: dict
    metadata: dict


def _parse_torch_dtype(name):
    short = name[len("torch."):] if name.startswith("torch.") else name
    dt = getattr(_torch, short, None) if _torch is not None else None
    if _torch is None or not isinstance(dt, _torch.dtype):
        raise ValueError("unknown torch dtype: %s" % name)
    return dt


def _torch_dtype_to_numpy(name):
    return _np.dtype(_torch.empty(0, dtype=_parse_torch_dtype(name)).numpy().dtype)


def _contiguous(value, dtype):
    if isinstance(value, _np.ndarray) and value.dtype == dtype and value.flags.c_contiguous:
        return value
    return _np.ascontiguousarray(_np.asarray(value, dtype=dtype))


def _flat_data_payload(flat_arrays, dtype, total):
    """The data member of a typed column: copied straight into pool memory when the fast
    copy is there, else given as the rows' buffers."""
    if _concat_arrays_into is not None:
        return _DirectCopyPayload.from_flat_arrays(flat_arrays, dtype, total)
    return _MultiBufferPayload(buffers=tuple(memoryview(a.data).cast("B") for a in flat_arrays),
                               owners=tuple(flat_arrays), dtype=_np.dtype(dtype).str, shape=(total,))


def _single_buffer_payload(flat, dtype, total):
    return _MultiBufferPayload(buffers=(memoryview(flat.data).cast("B"),), owners=(flat,),
                               dtype=_np.dtype(dtype).str, shape=(total,))


def _typed_meta(dtype, max_ndim, row_format, ndarray_rows=None, contiguous=False):
    meta = {"dtype": str(_np.dtype(dtype)), "max_ndim": int(max_ndim), "shape_policy": "ragged",
            "row_format": row_format, "ndarray_rows": ndarray_rows}
    if contiguous:
        meta["physical_layout"] = "contiguous_flat"
    return meta


def _encode_typed_ragged_regular_ndarray_rows(values, dtype):
    """Rows that are contiguous ndarrays of one dtype and one shape (two or more): one flat
    buffer, regular offsets. None when the rows are not like that."""
    dtype = _np.dtype(dtype)
    if len(values) < 2:
        return None
    first = values[0]
    for v in values:
        if not isinstance(v, _np.ndarray) or v.dtype != dtype or not v.flags.c_contiguous or v.shape != first.shape:
            return None
    rows, width = len(values), int(first.size)
    if width:
        data = _flat_data_payload([v.reshape(-1) for v in values], dtype, rows * width)
    else:
        data = _np.zeros(0, dtype=dtype)
    ndim = first.ndim
    shapes = _np.zeros((rows, max(ndim, 1)), dtype=_np.int64)
    if ndim:
        shapes[:] = first.shape
    payload = {"data": data, "offsets": _np.arange(rows + 1, dtype=_np.int64) * width, "shapes": shapes,
               "ndims": _np.full(rows, ndim, dtype=_np.int16), "nulls": _np.zeros(rows, dtype=_np.bool_)}
    return payload, _typed_meta(dtype, ndim, "ndarray", contiguous=True)


def _encode_typed_ragged_ndarray_rows(values, dtype):
    """Rows that are all ndarrays (or None): flat data; when every row shares the trailing
    dims, shapes keep them so rows decode as views. None for other rows."""
    dtype = _np.dtype(dtype)
    regular = _encode_typed_ragged_regular_ndarray_rows(values, dtype)
    if regular is not None:
        return regular
    rows = len(values)
    if rows == 0 or not all(v is None or isinstance(v, _np.ndarray) for v in values):
        return None
    nulls = _np.asarray([v is None for v in values], dtype=_np.bool_)
    arrays = [_contiguous(v, dtype) for v in values if v is not None]
    lengths = _np.asarray([0 if v is None else _np.asarray(v).size for v in values], dtype=_np.int64)
    offsets = _np.zeros(rows + 1, dtype=_np.int64)
    _np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    flats = [a.reshape(-1) for a in arrays]
    if len(flats) == 1:
        data = _single_buffer_payload(flats[0], dtype, total)
    elif total:
        data = _flat_data_payload(flats, dtype, total)
    else:
        data = _single_buffer_payload(_np.empty(0, dtype=dtype), dtype, 0)
    ndims_seen = {a.ndim for a in arrays}
    tails = {a.shape[1:] for a in arrays if a.ndim}
    same_tail = (len(ndims_seen) == 1 and 0 not in ndims_seen and len(tails) == 1
                 and all(d != 0 for d in next(iter(tails))))
    ndims = _np.zeros(rows, dtype=_np.int16)
    if not arrays or ndims_seen == {0}:
        max_ndim = 0
        shapes = _np.zeros((rows, 1), dtype=_np.int64)
    elif same_tail:
        max_ndim = ndims_seen.pop()
        tail = next(iter(tails))
        shapes = _np.zeros((rows, max_ndim), dtype=_np.int64)
        tail_elems = int(_np.prod(tail, dtype=_np.int64)) if tail else 1
        shapes[:, 0] = lengths // tail_elems
        if max_ndim > 1:
            shapes[:, 1:] = tail
        ndims[~nulls] = max_ndim
    else:
        max_ndim = max(a.ndim for a in arrays)
        shapes = _np.zeros((rows, max(max_ndim, 1)), dtype=_np.int64)
        it = iter(arrays)
        for r in range(rows):
            if nulls[r]:
                continue
            a = next(it)
            ndims[r] = a.ndim
            shapes[r, :a.ndim] = a.shape
    payload = {"data": data, "offsets": offsets, "shapes": shapes, "ndims": ndims, "nulls": nulls}
    return payload, _typed_meta(dtype, max_ndim, "ndarray", contiguous=True)


def _encode_typed_ragged_values(values, dtype_hint=None):
    """A column of numeric rows (ndarrays, lists, scalars, None) as typed_ragged payloads."""
    if dtype_hint is None:
        present = [_np.asarray(v) for v in values if v is not None]
        dtype = _np.result_type(*present) if present else _np.dtype(_TYPED_RAGGED_DEFAULT_DTYPE)
    else:
        dtype = _np.dtype(dtype_hint)
    if dtype.hasobject:
        raise ValueError("typed_ragged codec requires non-object dtype")
    fast = _encode_typed_ragged_ndarray_rows(values, dtype)
    if fast is not None:
        return fast
    arrays = [_np.asarray([], dtype=dtype) if v is None else _contiguous(v, dtype) for v in values]
    rows = len(arrays)
    max_ndim = max((a.ndim for a in arrays), default=0)
    offsets = _np.zeros(rows + 1, dtype=_np.int64)
    ndims = _np.zeros(rows, dtype=_np.int16)
    shapes = _np.zeros((rows, max(max_ndim, 1)), dtype=_np.int64)
    flats = []
    for r, a in enumerate(arrays):
        flats.append(a.reshape(-1))
        offsets[r + 1] = offsets[r] + a.size
        ndims[r] = a.ndim
        shapes[r, :a.ndim] = a.shape
    total = int(offsets[-1])
    if flats:
        data = _flat_data_payload(flats, dtype, total)
    else:
        data = _single_buffer_payload(_np.empty(0, dtype=dtype), dtype, 0)
    is_nd = [v is not None and isinstance(v, _np.ndarray) for v in values]
    if all(v is None or nd for v, nd in zip(values, is_nd)):
        row_format = "ndarray"
    elif any(is_nd):
        row_format = "mixed"
    else:
        row_format = "list"
    payload = {"data": data, "offsets": offsets, "shapes": shapes, "ndims": ndims,
               "nulls": _np.asarray([v is None for v in values], dtype=_np.bool_)}
    return payload, _typed_meta(dtype, max_ndim, row_format, is_nd if row_format == "mixed" else None)


class _OwnerBackedList(list):
    """A list of rows that are views of pool memory; keeps the pool lease alive."""

    def __init__(self, values, owner):
        super().__init__(values)
        self._mooncake_pool_owner = owner


class _OwnerBackedObjectArray(_np.ndarray if _np is not None else object):
    def __array_finalize__(self, obj):
        if obj is not None:
            self._mooncake_pool_owner = getattr(obj, "_mooncake_pool_owner", None)

    def tolist(self):
        values = super().tolist()
        owner = getattr(self, "_mooncake_pool_owner", None)
        return values if owner is None else _OwnerBackedList(values, owner)


def _object_array_from_decoded_values(values):
    out = _np.empty(len(values), dtype=object)
    out[:] = list(values)
    owner = getattr(values, "_mooncake_pool_owner", None)
    if owner is None:
        for v in values:
            owner = getattr(v, "_mooncake_pool_owner", None) if v is not None else None
            if owner is not None:
                break
    if owner is None:
        return out
    wrapped = out.view(_OwnerBackedObjectArray)
    wrapped._mooncake_pool_owner = owner
    return wrapped


def _as_typed_data(raw, dtype):
    if _torch is not None and isinstance(raw, _torch.Tensor):
        return raw.numpy()
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return _np.frombuffer(raw, dtype=dtype)
    if isinstance(raw, _np.ndarray):
        return raw if raw.dtype == dtype else raw.view(_np.uint8).reshape(-1).view(dtype)
    return _np.asarray(raw, dtype=dtype)


def _regular_width(offsets, rows):
    if rows <= 0 or int(offsets[0]) != 0 or int(offsets[-1]) % rows:
        return None
    width = int(offsets[-1]) // rows
    return width if bool(_np.all(_np.diff(offsets) == width)) else None


def _decode_typed_ragged_ndarray_rows_fast(data, offsets, shapes, ndims, nulls, rows, metadata):
    """Rows of a contiguous ndarray column as views of ``data`` (None when the layout does
    not allow it)."""
    max_ndim = int(metadata.get("max_ndim", 0))
    owner = getattr(data, "_mooncake_pool_owner", None)
    src = data.view(_np.ndarray) if isinstance(data, _np.ndarray) else data
    if max_ndim < 1 or rows == 0:
        return None
    present = _np.flatnonzero(~_np.asarray(nulls, dtype=bool))
    if present.size == 0:
        return [None] * rows
    if max_ndim == 1:
        flat, axis_offsets, tail = src, offsets, ()
    else:
        tail = tuple(int(d) for d in shapes[int(present[0]), 1:max_ndim])
        for r in present:
            if int(ndims[r]) != max_ndim or tuple(int(d) for d in shapes[r, 1:max_ndim]) != tail:
                return None
        tail_elems = int(_np.prod(tail, dtype=_np.int64))
        if tail_elems <= 0 or int(offsets[-1]) % tail_elems:
            return None
        flat, axis_offsets = src.reshape((-1,) + tail), offsets // tail_elems
    if present.size == rows:
        width = _regular_width(axis_offsets, rows)
        if width is not None:
            out = list(flat.reshape((rows, width) + tail))
            return out if owner is None else _OwnerBackedList(out, owner)
    out = [None if nulls[r] else flat[int(axis_offsets[r]):int(axis_offsets[r + 1])] for r in range(rows)]
    return out if owner is None else _OwnerBackedList(out, owner)


def _decode_typed_ragged_values(payload, rows, metadata=None):
    metadata = metadata or {}
    dtype = _np.dtype(metadata.get("dtype", _TYPED_RAGGED_DEFAULT_DTYPE))
    data = _as_typed_data(payload["data"], dtype)
    offsets, shapes, ndims, nulls = payload["offsets"], payload["shapes"], payload["ndims"], payload["nulls"]
    row_format = metadata.get("row_format")
    if row_format == "ndarray" and metadata.get("physical_layout") == "contiguous_flat":
        fast = _decode_typed_ragged_ndarray_rows_fast(data, offsets, shapes, ndims, nulls, rows, metadata)
        if fast is not None:
            return fast
    nd_rows = metadata.get("ndarray_rows") or []
    out = []
    for r in range(rows):
        if bool(nulls[r]):
            out.append(None)
            continue
        nd = int(ndims[r])
        arr = data[int(offsets[r]):int(offsets[r + 1])].reshape(tuple(int(d) for d in shapes[r, :nd]))
        as_array = row_format == "ndarray" or (row_format == "mixed" and bool(nd_rows[r]))
        out.append(arr if as_array else arr.tolist())
    return out


def _encode_ragged_tensor_values(values):
    if _torch is None:
        raise RuntimeError("torch is required to encode ragged tensor fields")
    dtype, arrays = None, []
    for v in values:
        if v is None:
            arrays.append(None)
            continue
        if isinstance(v, _np.ndarray):
            if v.dtype == object:
                raise ValueError("ragged tensor codec requires numeric ndarray values")
            t = _torch.as_tensor(v if v.flags.writeable else v.copy())
        else:
            t = v.detach()
        if t.device.type != "cpu" or not t.is_contiguous():
            t = t.cpu().contiguous()
        if t.dtype == _torch.bfloat16:
            raise ValueError("ragged tensor codec does not support torch.bfloat16")
        if dtype is None:
            dtype = t.dtype
        elif t.dtype != dtype:
            raise ValueError("mixed tensor dtype: %s vs %s" % (dtype, t.dtype))
        arrays.append(t.numpy())
    torch_dtype = dtype or _parse_torch_dtype(_RAGGED_TENSOR_DEFAULT_DTYPE)
    payload, meta = _encode_typed_ragged_values(arrays, _torch_dtype_to_numpy(str(torch_dtype)))
    meta["dtype"] = str(torch_dtype)
    return payload, meta


def _decode_ragged_tensor_values(payload, rows, metadata=None):
    if _torch is None:
        raise RuntimeError("torch is required to decode ragged tensor fields")
    name = (metadata or {}).get("dtype", _RAGGED_TENSOR_DEFAULT_DTYPE)
    meta = dict(metadata or {})
    meta["dtype"] = str(_torch_dtype_to_numpy(name))
    tdtype = _parse_torch_dtype(name)
    out = []
    for v in _decode_typed_ragged_values(payload, rows, meta):
        if v is None:
            out.append(None)
        elif isinstance(v, _np.ndarray):
            out.append(_torch.from_numpy(v).to(tdtype))
        else:
            out.append(_torch.as_tensor(v, dtype=tdtype))
    return out


def _normalize_ragged_tensor_dict_keys(keys):
    out, seen = [], set()
    for k in (keys.keys() if isinstance(keys, Mapping) else keys):
        if not isinstance(k, str):
            raise TypeError("ragged_tensor_dict keys must be strings")
        if not k:
            raise ValueError("ragged_tensor_dict keys must not be empty")
        if any(c in k for c in "./\\"):
            raise ValueError("ragged_tensor_dict keys must not contain '.', '/', or '\\'")
        if k in seen:
            raise ValueError("ragged_tensor_dict keys contain duplicate key %r" % k)
        seen.add(k)
        out.append(k)
    return out


def _encode_ragged_tensor_dict_values(values, schema):
    """Rows of dict[str, Tensor] (or None): one ragged_tensor column per key."""
    declared = schema.metadata.get("keys")
    keys = None if declared is None else _normalize_ragged_tensor_dict_keys(declared)
    found = set()
    for r, row in enumerate(values):
        if row is None:
            continue
        if not isinstance(row, Mapping):
            raise TypeError("ragged_tensor_dict rows must be mappings or None; row %d is %s"
                            % (r, type(row).__name__))
        nulls = sorted(k for k, v in row.items() if v is None)
        if nulls:
            raise TypeError("ragged_tensor_dict rows cannot contain explicit None tensor values; "
                            "row %d has explicit None for %s" % (r, nulls))
        row_keys = _normalize_ragged_tensor_dict_keys(row.keys())
        if keys is None:
            found.update(row_keys)
        else:
            extra = sorted(set(row_keys) - set(keys))
            if extra:
                raise ValueError("ragged_tensor_dict rows contain keys not declared in FieldSchema "
                                 "metadata['keys']; row %d has keys not declared: %s" % (r, extra))
    if keys is None:
        keys = _normalize_ragged_tensor_dict_keys(sorted(found))
    if keys and _torch is None:
        raise RuntimeError("torch is required to encode ragged_tensor_dict fields")
    payload = {"null_mask": _np.asarray([v is None for v in values], dtype=_np.bool_)}
    codecs = {}
    for k in keys:
        try:
            sub, meta = _encode_ragged_tensor_values([None if v is None else v.get(k) for v in values])
        except _ENCODING_FALLBACK_ERRORS as e:
            raise ValueError("failed to encode ragged_tensor_dict key %r" % k) from e
        for name, value in sub.items():
            payload["%s.%s" % (k, name)] = value
        codecs[k] = meta
    return _EncodedStructuredLeaf("ragged_tensor_dict", len(values), payload, {"keys": keys, "key_codecs": codecs})


def _ragged_tensor_dict_payload_items(payload, key, kind="payload"):
    prefix = key + "."
    items = {n[len(prefix):]: v for n, v in payload.items() if n.startswith(prefix)}
    missing = sorted(_RAGGED_TENSOR_PAYLOAD_NAMES - set(items))
    if missing:
        raise ValueError("ragged_tensor_dict %s for key %r is missing payloads: %s" % (kind, key, missing))
    return items


def _decode_ragged_tensor_dict_values(payload, rows, metadata):
    mask = payload["null_mask"]
    if isinstance(mask, (bytes, bytearray)):
        mask = _np.frombuffer(mask, dtype=_np.bool_)
    keys = metadata.get("keys", [])
    columns = {k: _decode_ragged_tensor_values(_ragged_tensor_dict_payload_items(payload, k), rows,
                                               metadata.get("key_codecs", {}).get(k)) for k in keys}
    out = []
    for r in range(rows):
        if bool(mask[r]):
            out.append(None)
        else:
            out.append({k: columns[k][r] for k in keys if columns[k][r] is not None})
    return out


def _encode_numeric_scalar_values(values, decision):
    dtype = _np.dtype(decision.metadata["dtype"])
    fill = False if dtype == _np.bool_ else 0
    data = _np.asarray([fill if v is None else v for v in values], dtype=dtype)
    return ({"data": data, "nulls": _np.asarray([v is None for v in values], dtype=_np.bool_)},
            {"dtype": str(data.dtype), "shape": list(data.shape)})


def _decode_numeric_scalar_values(payload):
    data, nulls = payload["data"], _np.asarray(payload["nulls"], dtype=bool)
    if not nulls.any():
        return data.tolist()
    obj = data.astype(object)
    obj[nulls] = None
    return obj.tolist()


def _value_to_media_bytes(value):
    """(bytes, media type, encoding) of a bytes-like value or a PIL image (raw pixels)."""
    if value is None:
        return b"", None, {"kind": "null"}
    if _is_pil_image(value):
        img = value.convert(value.mode) if getattr(value, "readonly", False) else value
        return (img.tobytes(), "image/raw",
                {"kind": "pil_raw", "mode": img.mode, "size": list(img.size), "format": getattr(value, "format", None)})
    return bytes(value), None, {"kind": "bytes"}


def _multi_buffer_bytes_payload(parts):
    return _MultiBufferPayload(tuple(_bytes_view(p, "payload part") for p in parts if len(p)), tuple(parts))


def _encode_bytes_like_values(values):
    offsets, parts, types, encodings = [0], [], [], []
    for v in values:
        data, media_type, enc = _value_to_media_bytes(v)
        parts.append(data)
        types.append(media_type)
        encodings.append(enc)
        offsets.append(offsets[-1] + len(data))
    meta = {}
    if any(e.get("kind") == "pil_raw" for e in encodings):
        meta["media_encodings"] = encodings
    media = sorted({t for t in types if t})
    if media:
        meta["media_types"] = media
        meta["encode_source"] = "raw_pixels_from_object"
    return ({"data": _multi_buffer_bytes_payload(parts), "offsets": _np.asarray(offsets, dtype=_np.int64),
             "nulls": _np.asarray([v is None for v in values], dtype=_np.bool_)}, meta)


def _decode_media_bytes(data, encoding):
    if not encoding or encoding.get("kind") != "pil_raw":
        return bytes(data)
    try:
        from PIL import Image
    except ImportError:
        return bytes(data)
    img = Image.frombuffer(encoding["mode"], tuple(encoding["size"]), bytes(data), "raw", encoding["mode"], 0, 1)
    img.format = encoding.get("format")
    return img


def _decode_bytes_like_values(payload, rows, metadata=None):
    data, offsets, nulls = memoryview(payload["data"]).cast("B"), payload["offsets"], payload["nulls"]
    encodings = (metadata or {}).get("media_encodings", [])
    out = []
    for r in range(rows):
        if bool(nulls[r]):
            out.append(None)
            continue
        enc = encodings[r] if r < len(encodings) else None
        out.append(_decode_media_bytes(data[int(offsets[r]):int(offsets[r + 1])], enc))
    return out


def _encode_media_list_values(values):
    row_offsets, byte_offsets, parts, types, encodings = [0], [0], [], [], []
    for v in values:
        items = [] if v is None else list(v)
        for item in items:
            data, media_type, enc = _value_to_media_bytes(item)
            parts.append(data)
            types.append(media_type)
            encodings.append(enc)
            byte_offsets.append(byte_offsets[-1] + len(data))
        row_offsets.append(row_offsets[-1] + len(items))
    meta = {"encode_source": "raw_pixels_from_object", "media_encodings": encodings}
    media = sorted({t for t in types if t})
    if media:
        meta["media_types"] = media
    return ({"data": b"".join(parts), "row_offsets": _np.asarray(row_offsets, dtype=_np.int64),
             "byte_offsets": _np.asarray(byte_offsets, dtype=_np.int64),
             "nulls": _np.asarray([v is None for v in values], dtype=_np.bool_)}, meta)


def _decode_media_list_values(payload, rows, metadata=None):
    data = memoryview(payload["data"]).cast("B")
    ro, bo, nulls = payload["row_offsets"], payload["byte_offsets"], payload["nulls"]
    encodings = (metadata or {}).get("media_encodings", [])
    out = []
    for r in range(rows):
        if bool(nulls[r]):
            out.append(None)
            continue
        out.append([_decode_media_bytes(data[int(bo[i]):int(bo[i + 1])], encodings[i] if i < len(encodings) else None)
                    for i in range(int(ro[r]), int(ro[r + 1]))])
    return out


def _require_msgpack():
    if _msgpack is None:
        raise RuntimeError("the msgpack_ragged codec needs the msgpack package (Debian: python3-msgpack)")
    return _msgpack


def _encode_msgpack_ragged_values(path, values):
    packer = _require_msgpack().Packer(use_bin_type=True, strict_types=True)
    buf = bytearray()
    offsets = _np.zeros(len(values) + 1, dtype=_np.int64)
    nulls = _np.zeros(len(values), dtype=_np.bool_)
    try:
        for i, v in enumerate(values):
            if v is None:
                nulls[i] = True
            else:
                buf += packer.pack(v)
            offsets[i + 1] = len(buf)
    except TypeError as e:
        raise ValueError("unsupported structured non-tensor field %s: msgpack codec cannot encode value" % path) from e
    return {"data": buf, "offsets": offsets, "nulls": nulls}, {}


def _decode_msgpack_ragged_values(payload, rows):
    offsets, nulls = payload["offsets"], payload["nulls"]
    if len(offsets) != rows + 1:
        raise ValueError("msgpack_ragged offsets length %d does not match rows %d" % (len(offsets), rows))
    if len(nulls) != rows:
        raise ValueError("msgpack_ragged nulls length %d does not match rows %d" % (len(nulls), rows))
    unpacker = _require_msgpack().Unpacker(raw=False)
    unpacker.feed(bytes(payload["data"]))
    decoded = list(unpacker)
    want = rows - int(_np.count_nonzero(_np.asarray(nulls, dtype=bool)))
    if len(decoded) != want:
        raise ValueError("msgpack_ragged decoded %d rows, expected %d" % (len(decoded), rows))
    it = iter(decoded)
    return [None if bool(n) else next(it) for n in nulls]


def _json_bytes(v):
    return json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _encode_leaf_payload(codec, values, path="", decision=None, dtype_hint=None):
    """(payload, metadata) of a column under one codec."""
    if codec == "ragged_tensor":
        return _encode_ragged_tensor_values(values)
    if codec == "typed_ragged":
        return _encode_typed_ragged_values(values, dtype_hint=dtype_hint)
    if codec == "media_list_ragged":
        return _encode_media_list_values(values)
    if codec == "ndarray":
        return _encode_numeric_scalar_values(values, decision)
    if codec in ("bytes_ragged", "media_bytes"):
        return _encode_bytes_like_values(values)
    if codec == "utf8_ragged":
        return _encode_bytes_like_values([None if v is None else v.encode("utf-8") for v in values])
    if codec == "msgpack_ragged":
        return _encode_msgpack_ragged_values(path, values)
    if codec == "json_ragged":
        return _encode_bytes_like_values([None if v is None else _json_bytes(v) for v in values])
    raise ValueError("unsupported structured non-tensor codec: %s" % codec)


def _encode_structured_leaf(values, decision):
    if not decision.accepted:
        raise ValueError("unsupported structured non-tensor field: %s" % decision.reason)
    payload, meta = _encode_leaf_payload(decision.codec, values, decision=decision)
    meta.update({"schema_source": "inferred_from_runtime_values", "decision_reason": decision.reason,
                 "normalized_type": decision.normalized_type})
    meta.update(decision.metadata)
    return _EncodedStructuredLeaf(decision.codec, len(values), payload, meta)


def _decode_structured_leaf(codec, payload, rows, metadata=None):
    if codec == "ragged_tensor":
        return _decode_ragged_tensor_values(payload, rows, metadata)
    if codec == "typed_ragged":
        return _decode_typed_ragged_values(payload, rows, metadata)
    if codec == "media_list_ragged":
        return _decode_media_list_values(payload, rows, metadata)
    if codec == "ndarray":
        return _decode_numeric_scalar_values(payload)
    if codec == "media_bytes":
        return _decode_bytes_like_values(payload, rows, metadata)
    if codec == "bytes_ragged":
        return _decode_bytes_like_values(payload, rows)
    if codec == "utf8_ragged":
        return [None if v is None else v.decode("utf-8") for v in _decode_bytes_like_values(payload, rows)]
    if codec == "msgpack_ragged":
        return _decode_msgpack_ragged_values(payload, rows)
    if codec == "json_ragged":
        return [None if v is None else json.loads(v) for v in _decode_bytes_like_values(payload, rows)]
    raise ValueError("unknown structured non-tensor codec: %s" % codec)


# -- recursive (dict / list) columns -------------------------------------------------

def _structured_path_tokens(path):
    """The keys and indexes of a path (``a.b[0]``, with ``\\`` escapes)."""
    tokens, cur, i = [], [], 0
    while i < len(path):
        c = path[i]
        if c == "\\" and i + 1 < len(path):
            cur.append(path[i + 1])
            i += 2
        elif c == ".":
            if cur:
                tokens.append("".join(cur))
                cur = []
            i += 1
        elif c == "[":
            if cur:
                tokens.append("".join(cur))
                cur = []
            j = path.index("]", i)
            tokens.append(int(path[i + 1:j]))
            i = j + 1
        else:
            cur.append(c)
            i += 1
    if cur:
        tokens.append("".join(cur))
    return tokens


def _lookup_structured_path(value, root_path, target_path):
    rest = target_path[len(root_path):]
    if rest.startswith("."):
        rest = rest[1:]
    cur = value
    for tok in (_structured_path_tokens(rest) if rest else []):
        if cur is MISSING:
            return MISSING
        if isinstance(tok, str):
            if not isinstance(cur, dict) or tok not in cur:
                return MISSING
        elif not isinstance(cur, (list, tuple)) or tok >= len(cur):
            return MISSING
        cur = cur[tok]
    return cur


def _should_encode_recursive_leaf(leaf):
    codec = leaf.decision.codec
    if codec in ("ragged_tensor", "bytes_ragged", "media_bytes", "media_list_ragged"):
        return True
    return codec == "typed_ragged" and any(isinstance(v, _np.ndarray) for v in _present(leaf.values))


def _should_encode_recursive_structure(leaves):
    return any(_should_encode_recursive_leaf(leaf) for leaf in leaves)


def _recursive_leaf_decision(values, decision):
    if not decision.accepted and all(v is None or v is MISSING for v in values):
        return _CodecDecision(True, "json_ragged", "all rows are null or missing", "json")
    return decision


def _encode_recursive(path, values, leaves, nodes, encode_leaf):
    """A column of dicts/lists as node masks plus one encoded column per leaf path."""
    payload, node_specs, leaf_specs = {}, [], []
    for nid, node in enumerate(nodes):
        spec = {"id": nid, "path": node.path, "node_type": node.node_type, "children": list(node.children)}
        name = "node.%d.missing" % nid
        payload[name] = _np.asarray([_lookup_structured_path(v, path, node.path) is MISSING for v in values],
                                    dtype=_np.bool_)
        spec["missing_payload"] = name
        if node.row_mask is not None:
            payload["node.%d.row_mask" % nid] = _np.asarray(node.row_mask, dtype=_np.bool_)
            spec["row_mask_payload"] = "node.%d.row_mask" % nid
        if node.lengths is not None:
            payload["node.%d.lengths" % nid] = _np.asarray(node.lengths, dtype=_np.int64)
            spec["lengths_payload"] = "node.%d.lengths" % nid
        node_specs.append(spec)
    for lid, leaf in enumerate(leaves):
        missing = _np.asarray([v is MISSING for v in leaf.values], dtype=_np.bool_)
        column = [None if m else v for m, v in zip(missing, leaf.values)]
        encoded = encode_leaf(leaf, column)
        members = {}
        for name, value in encoded.payload.items():
            payload["leaf.%d.%s" % (lid, name)] = value
            members[name] = "leaf.%d.%s" % (lid, name)
        payload["leaf.%d.missing" % lid] = missing
        members["missing"] = "leaf.%d.missing" % lid
        leaf_specs.append({"id": lid, "path": leaf.path, "codec": encoded.codec, "rows": encoded.rows,
                           "metadata": encoded.metadata, "payload_members": members})
    return _EncodedStructuredLeaf("structured_recursive", len(values), payload, {
        "schema_source": "inferred_from_runtime_values", "structure_version": 1, "root_path": path,
        "nodes": node_specs, "leaves": leaf_specs})


def _encode_recursive_structured_non_tensor_field(path, values, leaves, nodes):
    return _encode_recursive(path, values, leaves, nodes,
                             lambda leaf, column: _encode_structured_leaf(
                                 column, _recursive_leaf_decision(leaf.values, leaf.decision)))


def _child_path(node, child):
    if node["node_type"] == "dict":
        return "%s.%s" % (node["path"], _escape_key(str(child)))
    return "%s[%d]" % (node["path"], int(child))


def _path_depth(path):
    return path.count(".") + path.count("[")


def _reconstruct_structured_rows(metadata, payload, leaf_values, rows):
    by_path = dict(leaf_values)
    for node in sorted(metadata.get("nodes", []), key=lambda n: _path_depth(n["path"]), reverse=True):
        missing = payload[node["missing_payload"]] if node.get("missing_payload") else None
        mask = payload[node["row_mask_payload"]] if node.get("row_mask_payload") else None
        lengths = payload[node["lengths_payload"]] if node.get("lengths_payload") else None
        column = []
        for r in range(rows):
            if missing is not None and bool(missing[r]):
                column.append(MISSING)
            elif mask is not None and not bool(mask[r]):
                column.append(None)
            elif node["node_type"] == "dict":
                item = {}
                for child in node["children"]:
                    v = by_path[_child_path(node, child)][r]
                    if v is not MISSING:
                        item[child] = v
                column.append(item)
            else:
                n = int(lengths[r]) if lengths is not None else len(node["children"])
                item = [None] * n
                for child in node["children"]:
                    if int(child) < n:
                        v = by_path[_child_path(node, child)][r]
                        if v is not MISSING:
                            item[int(child)] = v
                column.append(item)
        by_path[node["path"]] = column
    return by_path[metadata["root_path"]]


def _decode_structured_recursive_field(encoded, payload, rows):
    metadata = encoded.get("metadata") or {}
    leaf_values = {}
    for leaf in metadata.get("leaves", []):
        members = leaf["payload_members"]
        sub = {n: payload[g] for n, g in members.items() if n != "missing"}
        values = _decode_structured_leaf(leaf["codec"], sub, rows, leaf.get("metadata"))
        missing = payload[members["missing"]]
        leaf_values[leaf["path"]] = [MISSING if bool(missing[r]) else values[r] for r in range(rows)]
    return _reconstruct_structured_rows(metadata, payload, leaf_values, rows)


def _decode_structured_non_tensor_encoded(encoded, payload, rows, metadata=None):
    codec = encoded.get("codec")
    if codec == "ragged_tensor_dict":
        return _decode_ragged_tensor_dict_values(payload, rows, metadata or encoded.get("metadata", {}))
    if codec == "structured_recursive":
        if metadata is not None:
            encoded = dict(encoded, metadata=metadata)
        return _decode_structured_recursive_field(encoded, payload, rows)
    return _decode_structured_leaf(codec, payload, rows, metadata if metadata is not None else encoded.get("metadata"))


# -- choosing the codec of a column --------------------------------------------------

def _normalize_structured_scalar(value):
    """numpy values as plain Python (for the msgpack and JSON codecs)."""
    if isinstance(value, _np.ndarray):
        return _normalize_structured_scalar(value.tolist()) if value.dtype == object else value.tolist()
    if isinstance(value, _np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {k: _normalize_structured_scalar(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalize_structured_scalar(v) for v in value]
    return value


def _normalize_values_for_fallback_codec(values, codec):
    if codec in ("msgpack_ragged", "json_ragged"):
        return [_normalize_structured_scalar(v) for v in values]
    return values


def _object_column(values):
    out = _np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _encode_recursive_if_structured(path, values):
    """The recursive encoding of a column of containers whose leaves need a binary codec
    (ndarray rows, tensors, bytes, media); None otherwise."""
    leaves, nodes = [], []
    infer_structure(path, values, leaves, nodes)
    wanted = ("ragged_tensor", "bytes_ragged", "media_bytes", "media_list_ragged")
    if not nodes or not any(
            leaf.decision.codec in wanted or (leaf.decision.codec == "typed_ragged"
                                              and leaf.decision.metadata.get("recursive_source") == "ndarray")
            for leaf in leaves):
        return None

    def encode_leaf(leaf, column):
        decision = _recursive_leaf_decision(leaf.values, leaf.decision)
        return _encode_with_schema(leaf.path, _object_column(_normalize_values_for_fallback_codec(column, decision.codec)),
                                   FieldSchema(codec=decision.codec, metadata=decision.metadata))
    return _encode_recursive(path, values, leaves, nodes, encode_leaf)


def _encode_with_fallback(path, value):
    """The codec inference of ``FieldSchema(codec="auto")``: recursive structure first,
    then the chosen leaf codec, then msgpack, then JSON."""
    values = list(value)
    errors = []
    try:
        rec = _encode_recursive_if_structured(path, values)
        if rec is not None:
            return rec
    except _ENCODING_FALLBACK_ERRORS as e:
        errors.append("structured_recursive: %s" % e)
    decision = _choose_leaf_codec(values)
    for codec in dict.fromkeys([decision.codec, "msgpack_ragged", "json_ragged"]):
        meta = dict(decision.metadata or {}) if codec == decision.codec else {}
        try:
            return _encode_with_schema(path, _object_column(_normalize_values_for_fallback_codec(values, codec)),
                                       FieldSchema(codec=codec, metadata=meta))
        except _ENCODING_FALLBACK_ERRORS as e:
            errors.append("%s: %s" % (codec, e))
    raise ValueError("unable to infer a safe codec for structured non-tensor field %r; tried %s" % (path, errors))


def _schema_ndarray_dtype(schema, required=False):
    name = schema.metadata.get("dtype")
    if name is None:
        if required:
            raise ValueError("FieldSchema metadata['dtype'] is required")
        return None
    try:
        dtype = _np.dtype(name)
    except (TypeError, ValueError) as e:
        raise ValueError("invalid FieldSchema metadata['dtype']: %r" % (name,)) from e
    if dtype.kind not in "biufc":
        raise ValueError("FieldSchema metadata['dtype'] must be numeric or bool, got %s" % dtype)
    return dtype


def _validate_schema_nullable(path, values, schema):
    if not schema.nullable and any(v is None for v in values):
        raise ValueError("FieldSchema for %r is not nullable" % path)


def _encode_with_schema(path, value, schema):
    """A column encoded with the codec a FieldSchema names (``auto``: inferred)."""
    values = list(value)
    _validate_schema_nullable(path, values, schema)
    codec = schema.codec
    if codec == "auto":
        return _encode_with_fallback(path, value)
    if codec == "ragged_tensor_dict":
        return _encode_ragged_tensor_dict_values(values, schema)
    if codec == "ndarray":
        dtype = _schema_ndarray_dtype(schema)
        if dtype is None:
            return _encode_with_fallback(path, value)
        payload, meta = _encode_numeric_scalar_values(
            values, _CodecDecision(True, "ndarray", "schema", "numeric scalar", {"dtype": str(dtype)}))
    elif codec == "typed_ragged":
        payload, meta = _encode_typed_ragged_values(values, dtype_hint=_schema_ndarray_dtype(schema))
    elif codec in ("ragged_tensor", "bytes_ragged", "media_bytes", "media_list_ragged", "utf8_ragged",
                   "msgpack_ragged", "json_ragged"):
        payload, meta = _encode_leaf_payload(codec, values, path)
    else:
        raise ValueError("unsupported schema codec: %r" % (codec,))
    return _EncodedStructuredLeaf(codec, len(values), payload, meta)


def _encode_structured_non_tensor_field(path, value):
    """An object column encoded by inference (no schema)."""
    values = list(value)
    leaves, nodes = [], []
    infer_structure(path, values, leaves, nodes)
    if nodes and _should_encode_recursive_structure(leaves):
        return _encode_recursive_structured_non_tensor_field(path, values, leaves, nodes)
    return _encode_structured_leaf(values, _choose_leaf_codec(values))


# ---------------------------------------------------------------------------
# Bundles: manifests and their payloads
# ---------------------------------------------------------------------------

def _validate_chunk_bytes(chunk_bytes):
    if chunk_bytes <= 0:
        raise ValueError("chunk_bytes must be positive")
    return chunk_bytes


def _normalize_key_prefix(key_prefix):
    prefix = key_prefix.strip("/")
    if not prefix or any(ord(c) < 32 for c in prefix):
        raise ValueError("key_prefix must be a non-empty key prefix")
    return prefix


def _validate_key_segment(value, name):
    if not isinstance(value, str) or not value or "/" in value or any(ord(c) < 32 for c in value):
        raise ValueError("invalid bundle %s: %r" % (name, value))


def _encode_json_dict(value, label):
    try:
        return json.dumps(value, separators=(",", ":")).encode("utf-8")
    except TypeError as e:
        raise TypeError("%s must be JSON-serializable" % label) from e


def _decode_json_dict(payload, label):
    value = json.loads(bytes(payload).decode("utf-8"))
    if not isinstance(value, dict):
        raise ValueError("%s must decode to a dict" % label)
    return value


def _encode_manifest(manifest):
    return _encode_json_dict(manifest, "bundle manifest")


def _decode_manifest(payload):
    return _decode_json_dict(payload, "bundle manifest")


def _encode_structured_metadata(metadata):
    return _encode_json_dict(metadata, "structured metadata")


def _decode_structured_metadata(payload):
    return _decode_json_dict(payload, "structured metadata")


def _copy_transfer_policy(policy):
    """The policy for control-plane bytes (metadata, manifests): always the copy path."""
    if policy.copy_mode == "copy":
        return policy
    return BundleTransferPolicy(max_inflight_put=policy.max_inflight_put, put_mode=policy.put_mode, copy_mode="copy")


def _empty_spec(key):
    return {"key": key, "bytes": 0, "chunks": []}


def _chunk_keys(key, count):
    return [key] if count == 1 else ["%s/chunk/%d" % (key, i) for i in range(count)]


class _BundleManifestStore(object):
    """Puts, validates, resolves and removes bundles under ``<prefix>/<partition>/<uuid>/``."""

    def __init__(self, store, transport, key_prefix, default_chunk_bytes):
        self._store = store
        self._transport = transport
        self._key_prefix = key_prefix
        self._default_chunk_bytes = default_chunk_bytes

    # -- policy -------------------------------------------------------------------------

    def _policy(self, policy, max_inflight_put=None):
        p = policy or BundleTransferPolicy()
        if max_inflight_put is not None:
            p = BundleTransferPolicy(max_inflight_put=max_inflight_put, put_mode=p.put_mode, copy_mode=p.copy_mode)
        if p.max_inflight_put < 1:
            raise ValueError("max_inflight_put must be positive")
        if p.put_mode not in ("auto", "batch", "parallel"):
            raise ValueError("unsupported put_mode: %s" % p.put_mode)
        if p.copy_mode not in ("auto", "zero_copy", "copy"):
            raise ValueError("unsupported copy_mode: %s" % p.copy_mode)
        return p

    # -- writes -------------------------------------------------------------------------

    def _new_object(self, partition):
        _validate_key_segment(partition, "partition")
        object_id = "%s/%s" % (partition, uuid.uuid4().hex)
        return object_id, "%s/%s" % (self._key_prefix, object_id)

    def _write_manifest(self, manifest_key, manifest, config, written):
        _check_status(_put_with_config(self._store, manifest_key, _encode_manifest(manifest), config),
                      "put", manifest_key)
        written.append(manifest_key)

    def put_bundle(self, meta, buffers, partition, chunk_bytes, policy, max_inflight_put, config=None):
        object_id, base = self._new_object(partition)
        meta_view = _bytes_view(meta, "meta")
        chunk = _validate_chunk_bytes(self._default_chunk_bytes if chunk_bytes is None else chunk_bytes)
        policy = self._policy(policy, max_inflight_put=max_inflight_put)
        written, specs = [], {}
        try:
            spec, keys = self._put_payload(base + "/meta", meta_view, chunk, _copy_transfer_policy(policy), config)
            written += keys
            meta_spec = spec
            for name, value in buffers.items():
                _validate_key_segment(name, "buffer name")
                spec, keys = self._put_member(base + "/buffer/" + name, name, value, chunk, policy, config)
                specs[name] = spec
                written += keys
            manifest = {"version": 1, "layout": "bundle", "object_id": object_id, "meta": meta_spec,
                        "buffers": specs}
            self._write_manifest(base + "/manifest", manifest, config, written)
        except BaseException:
            _cleanup_keys(self._store, written, strict=False)
            raise
        return RemoteBundleRef(manifest_key=base + "/manifest", manifest=manifest)

    def _put_member(self, key, name, value, chunk, policy, config):
        if isinstance(value, (_TensorPayload, _TensorObjectBufferPayload)):
            return self._put_tensor_payload(key, value, policy, config=config)
        if isinstance(value, _MultiBufferPayload):
            return self._put_multi_buffer_payload(key, value, chunk, policy, config=config)
        if isinstance(value, _DirectCopyPayload):
            return self._put_direct_copy_payload(key, value, chunk, policy, config=config)
        return self._put_payload(key, _bytes_view(value, name), chunk, policy, config)

    def put_bundle_manifest(self, meta, buffers, *, partition, chunk_bytes, policy, cleanup_keys=None, config=None):
        """A new bundle over buffers already stored by other bundles: new metadata and
        manifest only; ``cleanup_keys`` (keys of those bundles) are removed with it."""
        object_id, base = self._new_object(partition)
        meta_view = _bytes_view(meta, "meta")
        chunk = _validate_chunk_bytes(self._default_chunk_bytes if chunk_bytes is None else chunk_bytes)
        policy = self._policy(policy)
        written = []
        try:
            meta_spec, keys = self._put_payload(base + "/meta", meta_view, chunk, _copy_transfer_policy(policy), config)
            written += keys
            cleanup = list(dict.fromkeys(cleanup_keys or []))
            owners = {self._object_id_from_bundle_key(str(spec["key"])) for spec in buffers.values()}
            owners.update(self._object_id_from_bundle_key(k) for k in cleanup)
            manifest = {"version": 1, "layout": "bundle", "object_id": object_id, "meta": meta_spec,
                        "buffers": dict(buffers), "buffer_object_ids": sorted(o for o in owners if o)}
            if cleanup:
                manifest["cleanup_keys"] = cleanup
            self._validate_manifest(manifest)
            self._write_manifest(base + "/manifest", manifest, config, written)
        except BaseException:
            _cleanup_keys(self._store, written, strict=False)
            raise
        return RemoteBundleRef(manifest_key=base + "/manifest", manifest=manifest)

    def _put_payload(self, key, view, chunk_bytes, policy, config=None):
        if len(view) == 0:
            return _empty_spec(key), []
        parts = _split_view(view, chunk_bytes)
        keys = _chunk_keys(key, len(parts))
        self._transport.put_chunk_groups(keys, [[p] for p in parts], policy, config)
        return ({"key": key, "bytes": len(view), "chunks": [{"key": k, "bytes": len(p)} for k, p in zip(keys, parts)]},
                list(keys))

    def _put_multi_buffer_payload(self, key, value, chunk_bytes, policy, config=None):
        total = value.nbytes
        if total == 0:
            return _empty_spec(key), []
        if len(value.buffers) == 1:
            return self._put_payload(key, _bytes_view(value.buffers[0], "buffer"), chunk_bytes, policy, config)
        groups = _split_buffers([_bytes_view(b, "buffer") for b in value.buffers], chunk_bytes)
        keys = _chunk_keys(key, len(groups))
        self._transport.put_chunk_groups(keys, groups, policy, config)
        return ({"key": key, "bytes": total,
                 "chunks": [{"key": k, "bytes": _group_nbytes(g)} for k, g in zip(keys, groups)]}, list(keys))

    def _put_direct_copy_payload(self, key, value, chunk_bytes, transfer_policy, config=None):
        """Arrays copied by the native fast copy straight into pool leases, one lease per
        chunk of whole arrays, each stored with ``batch_put_from``. Without a pool or
        ``batch_put_from``, or with an array bigger than a chunk: the rows are joined and
        put as one payload."""
        if transfer_policy.copy_mode == "zero_copy":
            raise RuntimeError("zero-copy put requires tensor-object buffers")
        total = value.total_bytes
        if total == 0:
            return _empty_spec(key), []
        arrays = value.arrays
        if len(arrays) == 1:
            return self._put_payload(key, memoryview(arrays[0].data).cast("B"), chunk_bytes, transfer_policy, config)
        pool = self._transport._ensure_buffer_pool()
        batch_put_from = self._transport._batch_put_from
        if pool is None or not callable(batch_put_from) or any(a.nbytes > chunk_bytes for a in arrays):
            joined = _np.concatenate([a.reshape(-1).view(_np.uint8) for a in arrays])
            return self._put_payload(key, memoryview(joined.data).cast("B"), chunk_bytes, transfer_policy, config)
        batches, start, filled = [], 0, 0  # (first array, count, bytes) per chunk
        for i, a in enumerate(arrays):
            if filled and filled + a.nbytes > chunk_bytes:
                batches.append((start, i - start, filled))
                start, filled = i, 0
            filled += a.nbytes
        if filled:
            batches.append((start, len(arrays) - start, filled))
        keys = _chunk_keys(key, len(batches))
        transport = self._transport

        def put_batches(ks, bs):
            for k, (first, count, size) in zip(ks, bs):
                lease = pool.acquire(size)
                try:
                    copied = _concat_arrays_into(arrays, lease.ptr, size, first, count)
                    if copied != size:
                        raise RuntimeError("native fast-copy wrote %s bytes, expected %d" % (copied, size))
                    rc = _batch_put_from_with_config(batch_put_from, [k], [lease.ptr], [size], config)
                    transport._check_batch_put_results(rc, [k], "batch_put_from")
                finally:
                    lease.release()

        parallel = (transfer_policy.put_mode != "batch" and transfer_policy.max_inflight_put > 1
                    and len(batches) >= AUTO_PARALLEL_MIN_CHUNKS and total >= AUTO_PARALLEL_MIN_BYTES)
        try:
            if not parallel:
                put_batches(keys, batches)
            else:
                workers = max(1, min(transfer_policy.max_inflight_put, len(batches)))
                per = (len(batches) + workers - 1) // workers
                with ThreadPoolExecutor(max_workers=workers) as ex:
                    futures = [ex.submit(put_batches, keys[i:i + per], batches[i:i + per])
                               for i in range(0, len(batches), per)]
                    for f in as_completed(futures):
                        f.result()
        except BaseException:
            _cleanup_keys(self._store, keys, strict=False)
            raise
        return ({"key": key, "bytes": total, "chunks": [{"key": k, "bytes": b[2]} for k, b in zip(keys, batches)]},
                list(keys))

    def _put_tensor_payload(self, key, value, policy, config=None):
        def one_chunk(total):
            return {"key": key, "bytes": total, "chunks": [{"key": key, "bytes": total}]}, [key]

        if isinstance(value, _TensorObjectBufferPayload):
            return one_chunk(self._transport.put_tensor_object_buffer(key, value, config))
        if policy.copy_mode == "zero_copy":
            raise ValueError("zero-copy structured tensor fields require a BufferPool tensor-object buffer")
        if policy.copy_mode != "copy":
            spec = self._transport.put_tensor_payload_direct(key, value, config, _tensor_metadata_size())
            if spec is not None:
                return spec, [key]
            if _has_tensor_codec_helpers() and value.tensor.dim() > 0:
                try:
                    header, ptr, nbytes, owner = _tensor_payload_parts(value)
                    return one_chunk(self._transport.put_tensor_payload_from_pool(key, header, ptr, nbytes, owner,
                                                                                  config))
                except RuntimeError:
                    pass
        if not _has_tensor_codec_helpers() or value.tensor.dim() == 0:
            data = _torch_save_payload_bytes(value.tensor)
            spec, keys = self._put_payload(key, memoryview(data), len(data) or 1, policy, config)
            spec["format"] = "torch_save"
            return spec, keys
        data, header_bytes = _tensor_payload_bytes(value)
        spec, keys = self._put_payload(key, memoryview(data), len(data) or 1, policy, config)
        spec["metadata_bytes"] = header_bytes
        return spec, keys

    # -- manifests ----------------------------------------------------------------------

    def _object_id_from_bundle_key(self, key):
        prefix = self._key_prefix + "/"
        if not key.startswith(prefix):
            return None
        rest = key[len(prefix):]
        for suffix in ("/manifest", "/meta"):
            if rest.endswith(suffix):
                return rest[:-len(suffix)]
        for marker in ("/meta/", "/buffer/"):
            i = rest.find(marker)
            if i > 0:
                return rest[:i]
        return None

    def _validate_manifest(self, manifest):
        if not isinstance(manifest, dict) or manifest.get("version") != 1 or manifest.get("layout") != "bundle":
            raise ValueError("invalid bundle manifest")
        object_id = manifest.get("object_id")
        if not isinstance(object_id, str):
            raise ValueError("bundle manifest object_id must be a string")
        owners = manifest.get("buffer_object_ids", [object_id])
        if not isinstance(owners, list) or not all(isinstance(o, str) for o in owners):
            raise ValueError("bundle manifest buffer_object_ids must be a list of strings")
        bases = ["%s/%s" % (self._key_prefix, o) for o in owners]
        self._validate_payload_spec(manifest.get("meta"), ["%s/%s" % (self._key_prefix, object_id)])
        cleanup = manifest.get("cleanup_keys", [])
        if not isinstance(cleanup, list) or not all(self._is_allowed_cleanup_key(k, bases) for k in cleanup):
            raise ValueError("bundle manifest cleanup_keys are outside the bundle namespace")
        buffers = manifest.get("buffers")
        if not isinstance(buffers, dict):
            raise ValueError("bundle manifest buffers must be a dict")
        for name, spec in buffers.items():
            _validate_key_segment(name, "buffer name")
            self._validate_payload_spec(spec, bases)

    @staticmethod
    def _is_allowed_cleanup_key(key, bases):
        return isinstance(key, str) and any(key == b + "/manifest" or key.startswith(b + "/") for b in bases)

    @staticmethod
    def _validate_payload_spec(spec, base_keys=None):
        if not isinstance(spec, dict):
            raise ValueError("bundle payload spec must be a dict")
        key = spec.get("key")
        if not isinstance(key, str) or (base_keys is not None and not any(key.startswith(b + "/") for b in base_keys)):
            raise ValueError("bundle payload key is outside the bundle namespace")
        total = int(spec.get("bytes", -1))
        if total < 0:
            raise ValueError("bundle payload bytes must be non-negative")
        chunks = spec.get("chunks")
        if not isinstance(chunks, list) or (total and not chunks):
            raise ValueError("bundle payload chunks are invalid")
        seen, summed = set(), 0
        for c in chunks:
            if not isinstance(c, dict):
                raise ValueError("bundle chunk must be a dict")
            ck, n = c.get("key"), int(c.get("bytes", -1))
            if not isinstance(ck, str) or (ck != key and not ck.startswith(key + "/")):
                raise ValueError("bundle chunk key is outside the payload namespace")
            if ck in seen:
                raise ValueError("bundle chunk keys must be unique")
            if n < 0:
                raise ValueError("bundle chunk bytes must be non-negative")
            seen.add(ck)
            summed += n
        if summed != total:
            raise ValueError("bundle payload chunks total %d bytes, expected %d" % (summed, total))

    def resolve_manifest(self, ref):
        if isinstance(ref, RemoteBundleRef):
            manifest = ref.manifest or _decode_manifest(self._store.get(ref.manifest_key))
        else:
            manifest = ref.get("manifest")
            if manifest is None:
                key = ref.get("manifest_key")
                if not isinstance(key, str):
                    raise ValueError("bundle ref must include manifest_key")
                manifest = _decode_manifest(self._store.get(key))
        self._validate_manifest(manifest)
        return manifest

    def _manifest_key(self, ref, manifest):
        expected = "%s/%s/manifest" % (self._key_prefix, manifest["object_id"])
        key = ref.manifest_key if isinstance(ref, RemoteBundleRef) else ref.get("manifest_key")
        if key is None:
            return expected
        if key != expected:
            raise ValueError("bundle manifest_key does not match manifest object_id")
        return key

    def manifest_key(self, ref):
        return self._manifest_key(ref, self.resolve_manifest(ref))

    def payload_keys(self, spec):
        return [c["key"] for c in spec["chunks"]]

    def _payload_keys(self, manifest):
        return [c["key"] for spec in [manifest["meta"]] + list(manifest["buffers"].values()) for c in spec["chunks"]]

    def remove_bundle(self, ref):
        manifest = self.resolve_manifest(ref)
        keys = self._payload_keys(manifest) + list(manifest.get("cleanup_keys", []))
        keys.append(self._manifest_key(ref, manifest))
        _cleanup_keys(self._store, keys, strict=True)

    def remove_keys(self, keys, *, strict):
        _cleanup_keys(self._store, keys, strict=strict)

    # -- reads --------------------------------------------------------------------------

    def read_payload(self, spec):
        return self._transport.read_payload(spec)

    def read_payload_range(self, spec, offset, length):
        return self._transport.read_payload_range(spec, offset, length)

    def read_metadata(self, manifest):
        return _decode_structured_metadata(self.read_payload(manifest["meta"]))


# ---------------------------------------------------------------------------
# Structured objects: metadata plus typed members
# ---------------------------------------------------------------------------

def _normalize_structured_metadata(metadata):
    if not isinstance(metadata, Mapping):
        raise TypeError("structured metadata must be a mapping")
    out = dict(metadata)
    if STRUCTURED_FIELD_SPECS_KEY in out:
        raise ValueError("structured metadata key %r is reserved" % STRUCTURED_FIELD_SPECS_KEY)
    if not isinstance(out.get("layout", "structured"), str):
        raise ValueError("structured metadata layout must be a string")
    out.setdefault("layout", "structured")
    return out


def _has_tensor_codec_helpers():
    return (_mooncake_store is not None and callable(getattr(_mooncake_store, "_serialize_tensor", None))
            and callable(getattr(_mooncake_store, "_deserialize_tensor", None)))


def _tensor_codec_helper(name):
    fn = getattr(_mooncake_store, name, None) if _mooncake_store is not None else None
    if not callable(fn):
        raise RuntimeError("mooncake.store tensor serialization helpers are required for structured tensor fields")
    return fn


def _tensor_metadata_size():
    fn = getattr(_mooncake_store, "_tensor_metadata_size", None) if _mooncake_store is not None else None
    return int(fn()) if callable(fn) else 0


def _tensor_payload_parts(value):
    header, ptr, nbytes, owner = _tensor_codec_helper("_serialize_tensor")(value.tensor)
    return bytes(header), int(ptr), int(nbytes), owner


def _tensor_payload_bytes(value):
    header, ptr, nbytes, _owner = _tensor_payload_parts(value)
    if nbytes == 0:
        return header, len(header)
    return header + ctypes.string_at(ptr, nbytes), len(header)


def _deserialize_tensor_payload(payload):
    return _tensor_codec_helper("_deserialize_tensor")(payload)


def _torch_save_payload_bytes(value):
    buf = io.BytesIO()
    _torch.save(value, buf)
    return buf.getvalue()


def _deserialize_torch_save_payload(payload):
    return _torch.load(io.BytesIO(bytes(payload)), weights_only=True)


def _slice_tensor_metadata(header, shape, data_bytes):
    """A tensor header rewritten for a row slice: its data size and both shapes."""
    out = bytearray(header)
    struct.pack_into("<Q", out, 32, int(data_bytes))
    for base in (40, 104):
        for i, d in enumerate(shape):
            struct.pack_into("<q", out, base + 8 * i, int(d))
    return bytes(out)


def _encode_nested_tensor_field(value):
    spec = {"encoding": "torch_tensor", "dtype": str(value.dtype), "nested": True, "format": "torch_save"}
    parts = [value.values(), value.offsets()]
    lengths = value.lengths()
    if lengths is not None:
        parts.append(lengths)
    if _has_tensor_codec_helpers() and all(t.device.type == "cpu" for t in parts):
        blobs = [_tensor_payload_bytes(_TensorPayload(t))[0] for t in parts]
        spec.update({"format": "tensor_parts", "part_bytes": [len(b) for b in blobs],
                     "has_lengths": lengths is not None, "ragged_idx": int(getattr(value, "_ragged_idx", 1))})
        return spec, _MultiBufferPayload(buffers=tuple(memoryview(b) for b in blobs))
    return spec, memoryview(_torch_save_payload_bytes(value))


def _deserialize_nested_tensor_payload(payload, spec):
    fmt = spec.get("format", "torch_save")
    if fmt == "torch_save":
        return _deserialize_torch_save_payload(payload)
    if fmt != "tensor_parts":
        raise ValueError("unsupported nested tensor payload format: %s" % fmt)
    sizes = spec.get("part_bytes")
    want = 3 if spec.get("has_lengths") else 2
    if not isinstance(sizes, list) or len(sizes) != want:
        raise ValueError("nested tensor payload has invalid part metadata")
    tensors, pos = [], 0
    for n in sizes:
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise ValueError("nested tensor payload has invalid part size")
        if pos + n > len(payload):
            raise ValueError("nested tensor payload is truncated")
        tensors.append(_deserialize_tensor_payload(payload[pos:pos + n]))
        pos += n
    if pos != len(payload):
        raise ValueError("nested tensor payload has trailing bytes")
    return _torch.nested.nested_tensor_from_jagged(tensors[0], offsets=tensors[1],
                                                  lengths=tensors[2] if want == 3 else None,
                                                  jagged_dim=int(spec.get("ragged_idx", 1)))


def _encode_torch_tensor_field(value):
    if value.is_nested:
        if value.layout != _torch.jagged:
            raise ValueError("structured nested tensor fields require torch.jagged layout")
        return _encode_nested_tensor_field(value)
    return ({"encoding": "torch_tensor", "dtype": str(value.dtype), "shape": list(value.shape),
             "element_size": int(value.element_size())}, _TensorPayload(tensor=value))


def _encode_structured_field(value):
    """(field spec, what the bundle stores) of one member."""
    if isinstance(value, _TensorObjectBufferPayload):
        return {"encoding": "torch_tensor"}, value
    if isinstance(value, _TensorPayload):
        return _encode_torch_tensor_field(value.tensor)
    if isinstance(value, (_DirectCopyPayload, _MultiBufferPayload)):
        if value.dtype is not None and value.shape is not None:
            return {"encoding": "ndarray", "dtype": value.dtype, "shape": list(value.shape)}, value
        return {"encoding": "bytes"}, value
    if _torch is not None and isinstance(value, _torch.Tensor):
        return _encode_torch_tensor_field(value)
    if isinstance(value, _np.ndarray):
        arr = _np.ascontiguousarray(value)
        return ({"encoding": "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape)},
                arr.view(_np.uint8).reshape(-1))
    return {"encoding": "bytes"}, value


def _encode_structured_fields(metadata, fields):
    meta = _normalize_structured_metadata(metadata)
    specs, encoded = {}, {}
    for name, value in fields.items():
        _validate_key_segment(name, "buffer name")
        specs[name], encoded[name] = _encode_structured_field(value)
    if specs:
        meta[STRUCTURED_FIELD_SPECS_KEY] = specs
    return meta, encoded


def _structured_field_specs(metadata):
    specs = metadata.get(STRUCTURED_FIELD_SPECS_KEY, {})
    if not isinstance(specs, dict):
        raise ValueError("structured field specs must be a dict")
    return specs


def _merge_structured_stage_metadata(old, new):
    if old.get("dataproto") != new.get("dataproto"):
        raise ValueError("DataProto stage metadata mismatch during manifest merge")
    merged = dict(old)
    specs = dict(_structured_field_specs(old))
    added = _structured_field_specs(new)
    clash = sorted(set(specs) & set(added))
    if clash:
        raise ValueError("structured members already exist: %s" % clash)
    specs.update(added)
    if specs:
        merged[STRUCTURED_FIELD_SPECS_KEY] = specs
    return merged


def _normalized_member_slice(member_slice, total_rows):
    if member_slice.step <= 0:
        raise ValueError("structured ndarray slicing step must be positive")
    return slice(member_slice.start, member_slice.end, member_slice.step).indices(total_rows)


def _slice_rows(member_slice, total_rows):
    start, end, step = _normalized_member_slice(member_slice, total_rows)
    return range(start, end, step)


def _check_axis0(member_slice, what):
    if member_slice.axis != 0:
        raise ValueError("structured %s slicing currently supports axis=0 only" % what)


def _tensor_destination(name, destination):
    if not isinstance(destination, (_TensorObjectBufferPayload, _RawDestinationBuffer)):
        raise ValueError("structured tensor member %s only supports tensor_object_buffer or raw_destination "
                         "destinations" % name)
    return destination


def _select_nested_tensor_rows(value, indices):
    rows = value.unbind()
    chosen = [rows[int(i)] for i in indices]
    if chosen:
        out = _torch.nested.as_nested_tensor(chosen, layout=value.layout)
    else:
        offsets = _torch.zeros(1, dtype=value.offsets().dtype)
        out = _torch.nested.nested_tensor_from_jagged(value.values()[:0], offsets=offsets)
    if hasattr(value, "_ragged_idx"):
        out._ragged_idx = value._ragged_idx
    return out


def _resolve_ndarray_destination(name, destination, dtype, shape):
    if destination is None:
        return _np.empty(shape, dtype=dtype)
    if isinstance(destination, _RawDestinationBuffer):
        need = _nbytes_of(shape, dtype)
        if destination.size < need:
            raise ValueError("raw destination has %d bytes, expected at least %d" % (destination.size, need))
        return _array_at(destination.ptr, dtype, shape)
    if not isinstance(destination, _np.ndarray):
        raise TypeError("structured ndarray field %s destination must be a numpy.ndarray or raw_destination" % name)
    if destination.dtype != dtype:
        raise ValueError("structured ndarray field %s destination dtype mismatch: expected %s, got %s"
                         % (name, dtype.str, destination.dtype.str))
    if tuple(destination.shape) != tuple(shape):
        raise ValueError("structured ndarray field %s destination shape mismatch: expected %s, got %s"
                         % (name, tuple(shape), tuple(destination.shape)))
    if not destination.flags["C_CONTIGUOUS"]:
        raise ValueError("structured ndarray field %s destination must be C-contiguous" % name)
    if not destination.flags["WRITEABLE"]:
        raise ValueError("structured ndarray field %s destination must be writeable" % name)
    return destination


class _StructuredObjectLayer(object):
    """Reads the members of structured objects, whole, sliced or by row indexes."""

    def __init__(self, bundle_store):
        self._bundle_store = bundle_store
        self._transport = bundle_store._transport

    def put_structured_object(self, payload, partition, chunk_bytes, policy, max_inflight_put, config=None):
        metadata, buffers = _encode_structured_fields(payload.metadata, payload.buffers)
        policy = self._bundle_store._policy(policy, max_inflight_put=max_inflight_put)
        return self._bundle_store.put_bundle(_encode_structured_metadata(metadata), buffers, partition, chunk_bytes,
                                             policy, None, config=config)

    def read_spec(self, ref):
        return StructuredObjectReadSpec(ref=ref)

    def materialize(self, spec):
        return self.materialize_into(spec, None)

    def materialize_into(self, spec, destinations):
        if spec.member_names is not None and not spec.member_names:
            raise ValueError("structured read spec selected no members")
        manifest = self._bundle_store.resolve_manifest(spec.ref)
        metadata = self._bundle_store.read_metadata(manifest)
        buffers = manifest["buffers"]
        names = list(buffers) if spec.member_names is None else list(spec.member_names)
        unknown = [n for n in names if n not in buffers]
        if unknown:
            raise KeyError("unknown bundle buffers: %s" % unknown)
        specs = _structured_field_specs(metadata)
        dests = destinations or {}
        slices = dict(spec.member_slices)
        objects = {}
        for name in names:
            objects[name] = self.read_member(name, buffers[name], specs.get(name, {"encoding": "bytes"}),
                                             slices.get(name), dests.get(name))
        return StructuredObjectResult(metadata=dict(metadata), objects=objects)

    def read_member(self, name, payload_spec, field_spec, member_slice=None, destination=None, indices=None):
        """One member; ``member_slice`` or ``indices`` (rows along axis 0) select rows."""
        encoding = field_spec.get("encoding", "bytes")
        if encoding == "bytes":
            if member_slice is not None or indices is not None:
                raise ValueError("structured bytes member %s does not support slicing" % name)
            if destination is not None:
                raise ValueError("structured bytes member %s does not support materialize_into" % name)
            total = int(payload_spec.get("bytes", 0))
            if total > 0:
                arr = self._transport.read_range_into_pool_array(payload_spec, _np.dtype(_np.uint8), (total,), 0)
                if arr is not None:
                    return arr
            return self._bundle_store.read_payload(payload_spec)
        if encoding == "torch_tensor":
            return self._read_tensor(name, payload_spec, field_spec, member_slice, destination, indices)
        if encoding == "ndarray":
            return self._read_ndarray(name, payload_spec, field_spec, member_slice, destination, indices)
        raise ValueError("unsupported structured field encoding: %s" % encoding)

    # -- ndarrays ---------------------------------------------------------------------

    def _read_ndarray(self, name, payload_spec, field_spec, member_slice, destination, indices):
        dtype, shape = field_spec.get("dtype"), field_spec.get("shape")
        if not isinstance(dtype, str) or not isinstance(shape, list):
            raise ValueError("structured ndarray field %s is missing dtype or shape" % name)
        dtype, shape = _np.dtype(dtype), tuple(int(d) for d in shape)
        if member_slice is None and indices is None:
            nbytes = _nbytes_of(shape, dtype)
            if destination is None and nbytes > 0:
                arr = self._transport.read_range_into_pool_array(payload_spec, dtype, shape, 0)
                if arr is not None:
                    return arr
            target = _resolve_ndarray_destination(name, destination, dtype, shape)
            if nbytes:
                self._read_rows_into(payload_spec, target, destination, [(0, 0, nbytes)])
            return target
        if not shape:
            raise ValueError("structured ndarray slicing requires at least one dimension"
                             if indices is None else "structured ndarray indexed read requires at least one dimension")
        if indices is None:
            _check_axis0(member_slice, "ndarray")
            rows = _slice_rows(member_slice, shape[0])
        else:
            rows = indices
        width = _nbytes_of(shape[1:], dtype)
        out_shape = (len(rows),) + shape[1:]
        if indices is None and rows.step == 1 and len(rows) and destination is None:
            arr = self._transport.read_range_into_pool_array(payload_spec, dtype, out_shape, rows.start * width)
            if arr is not None:
                return arr
        target = _resolve_ndarray_destination(name, destination, dtype, out_shape)
        if len(rows) and width:
            self._read_rows_into(payload_spec, target, destination, _row_ranges(rows, width))
        return target

    def _read_rows_into(self, payload_spec, target, destination, ranges):
        """Row ranges of a payload into target (a numpy array, over caller memory for a
        raw destination)."""
        if isinstance(destination, _RawDestinationBuffer):
            if destination.pre_registered:
                self._transport.read_ranges_into_raw(payload_spec, destination.ptr, ranges)
            else:
                tmp = bytearray(_buffer_nbytes(target))
                self._transport.read_ranges_into(payload_spec, tmp, ranges)
                ctypes.memmove(destination.ptr, bytes(tmp), len(tmp))
            return
        self._transport.read_ranges_into(payload_spec, target.view(_np.uint8).reshape(-1), ranges)

    # -- tensors ----------------------------------------------------------------------

    def _read_tensor(self, name, payload_spec, field_spec, member_slice, destination, indices):
        selecting = member_slice is not None or indices is not None
        if field_spec.get("nested"):
            if destination is not None:
                raise ValueError("structured nested tensor member %s does not support destinations" % name)
            value = _deserialize_nested_tensor_payload(self._bundle_store.read_payload(payload_spec), field_spec)
            if not selecting:
                return value
            if indices is None:
                _check_axis0(member_slice, "nested tensor")
                indices = _slice_rows(member_slice, len(value))
            return _select_nested_tensor_rows(value, indices)
        if payload_spec.get("format") == "torch_save":
            if selecting and destination is not None:
                raise ValueError("structured torch_save tensor member %s does not support destinations" % name)
            if destination is None or selecting:
                value = _deserialize_torch_save_payload(self._bundle_store.read_payload(payload_spec))
                if indices is not None:
                    return value[list(indices)]
                if member_slice is not None:
                    _check_axis0(member_slice, "tensor")
                    s = _slice_rows(member_slice, len(value))
                    return value[s.start:s.stop:s.step]
                return value
        if not selecting:
            if destination is not None:
                dest = _tensor_destination(name, destination)
                got = self._transport.read_tensor_payload_into(payload_spec, dest)
                return dest if got is None else got
            if payload_spec.get("kind") == "tensor":
                return self._transport.read_tensor_payload(payload_spec)
            return _deserialize_tensor_payload(self._bundle_store.read_payload(payload_spec))
        header_bytes = int(payload_spec.get("metadata_bytes", -1))
        shape = field_spec.get("shape")
        elem = int(field_spec.get("element_size", 0))
        if header_bytes < 0 or not isinstance(shape, list) or elem <= 0:
            raise ValueError("structured tensor field %s is missing slice metadata" % name)
        if indices is None:
            _check_axis0(member_slice, "tensor")
        if not shape:
            raise ValueError("structured tensor slicing requires at least one dimension" if indices is None
                             else "structured tensor indexed read requires at least one dimension")
        if indices is None:
            rows = _slice_rows(member_slice, int(shape[0]))
            if rows.step != 1:
                raise ValueError("structured tensor slicing currently requires step=1")
        else:
            rows = indices
        width = elem * int(_np.prod(shape[1:], dtype=_np.int64))
        data_len = len(rows) * width
        header = _slice_tensor_metadata(self._bundle_store.read_payload_range(payload_spec, 0, header_bytes),
                                        [len(rows)] + list(shape[1:]), data_len)
        ranges = [(header_bytes + src, dst, n) for src, dst, n in _row_ranges(rows, width)] if data_len else []
        if destination is not None:
            dest = _tensor_destination(name, destination)
            if dest.size < header_bytes + data_len:
                raise ValueError("tensor destination has %d bytes, expected at least %d"
                                 % (dest.size, header_bytes + data_len))
            ctypes.memmove(dest.ptr, header, header_bytes)
            if ranges:
                if isinstance(dest, _RawDestinationBuffer) and dest.pre_registered:
                    self._transport.read_ranges_into_raw(payload_spec, dest.ptr,
                                                         [(s, d + header_bytes, n) for s, d, n in ranges])
                else:
                    tmp = bytearray(data_len)
                    self._transport.read_ranges_into(payload_spec, tmp, ranges, allow_get_into=False)
                    ctypes.memmove(dest.ptr + header_bytes, bytes(tmp), data_len)
            return dest
        data = bytearray(data_len)
        if ranges:
            self._transport.read_ranges_into(payload_spec, data, ranges, allow_get_into=False)
        return _deserialize_tensor_payload(header + bytes(data))


def _row_ranges(rows, width):
    """(source offset, destination offset, size) per selected row; runs of consecutive rows
    are merged into one range."""
    out = []
    for i, r in enumerate(rows):
        r = int(r)
        if out and out[-1][0] + out[-1][2] == r * width and out[-1][1] + out[-1][2] == i * width:
            s, d, n = out[-1]
            out[-1] = (s, d, n + width)
        else:
            out.append((r * width, i * width, width))
    return out


# ---------------------------------------------------------------------------
# DataProto helpers
# ---------------------------------------------------------------------------

_DATAPROTO_SCHEMA_SECTIONS = frozenset({"batch", "non_tensor_batch", "meta_info"})


@dataclass(frozen=True)
class _DataProtoRowSelection:
    count: int
    member_slice: Optional[StructuredMemberSlice] = None
    indices: Optional[tuple] = None


def _resolve_dataproto_ref(ref):
    if isinstance(ref, MooncakeDataProtoRef):
        return ref
    if is_dataproto_ref_handle(ref):
        return import_dataproto_ref(ref)
    raise TypeError("expected MooncakeDataProtoRef or DataProto ref handle, got %s" % type(ref).__name__)


def _mapping_to_dict(value):
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    items = getattr(value, "items", None)
    if callable(items):
        return dict(items())
    raise TypeError("expected mapping-like value, got %s" % type(value).__name__)


def _is_mapping_like_or_none(value):
    return value is None or isinstance(value, Mapping) or callable(getattr(value, "items", None))


def _is_dataproto_envelope_mapping(data):
    return bool(data) and set(data) <= {"batch", "non_tensor_batch", "meta_info"} and all(
        _is_mapping_like_or_none(v) for v in data.values())


def _split_dataproto_like(data):
    """(batch, non_tensor_batch, meta_info) of a DataProto-like object, an envelope dict, or
    a plain dict (its items are batch fields)."""
    if isinstance(data, Mapping):
        if _is_dataproto_envelope_mapping(data):
            return (_mapping_to_dict(data.get("batch")), _mapping_to_dict(data.get("non_tensor_batch")),
                    _mapping_to_dict(data.get("meta_info")))
        return dict(data), {}, {}
    return (_mapping_to_dict(getattr(data, "batch", None)), _mapping_to_dict(getattr(data, "non_tensor_batch", None)),
            _mapping_to_dict(getattr(data, "meta_info", None)))


def _dataproto_batch_size(batch, non_tensor_batch):
    sizes = {len(v) for section in (batch, non_tensor_batch) for v in section.values()}
    if len(sizes) > 1:
        raise ValueError("DataProto fields have inconsistent batch sizes: %s" % sorted(sizes))
    return sizes.pop() if sizes else 0


def _build_dataproto_like_result(batch, non_tensor_batch, meta_info, data_cls):
    if data_cls is None or data_cls is dict:
        return {"batch": batch, "non_tensor_batch": non_tensor_batch, "meta_info": meta_info}
    try:
        from_dict = getattr(data_cls, "from_dict", None)
        if callable(from_dict):
            return from_dict(batch, non_tensor_batch, meta_info=meta_info)
        return data_cls(batch=batch, non_tensor_batch=non_tensor_batch, meta_info=meta_info)
    except TypeError as e:
        raise TypeError("%r cannot be constructed from batch, non_tensor_batch, and meta_info"
                        % getattr(data_cls, "__name__", data_cls)) from e


def _schema_section(name, schema):
    section = schema.metadata.get("section")
    if section is not None and section not in _DATAPROTO_SCHEMA_SECTIONS:
        raise ValueError("FieldSchema for %r metadata['section'] must be one of %s"
                         % (name, sorted(_DATAPROTO_SCHEMA_SECTIONS)))
    return section


def _schema_for_section(field_schemas, name, section):
    schema = (field_schemas or {}).get(name)
    if schema is None:
        return None
    declared = _schema_section(name, schema)
    return schema if declared is None or declared == section else None


def _validate_dataproto_schema_sections(batch, non_tensor_batch, meta_info, field_schemas):
    if not field_schemas:
        return
    where = {}
    for section, fields in (("batch", batch), ("non_tensor_batch", non_tensor_batch), ("meta_info", meta_info)):
        for name in fields:
            where.setdefault(name, set()).add(section)
    for name, schema in field_schemas.items():
        declared = _schema_section(name, schema)
        actual = where.get(name)
        if declared is None or not actual or declared in actual:
            continue
        raise ValueError("FieldSchema for %r declares section %r, but data contains it in %s"
                         % (name, declared, ", ".join(repr(s) for s in sorted(actual))))


def _coerce_schema_non_tensor_value(name, value):
    if isinstance(value, _np.ndarray):
        return value
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        return _object_column(value)
    raise TypeError("non_tensor_batch field %r with FieldSchema must be an ndarray or non-string sequence" % name)


def _should_encode_non_tensor_field(value):
    return isinstance(value, _np.ndarray) and value.dtype == object


def _is_non_string_sequence(value):
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _is_dense(value):
    if _torch is not None and isinstance(value, _torch.Tensor):
        return value.ndim > 0
    return isinstance(value, _np.ndarray) and value.dtype != object and value.ndim > 0


def _is_row_aligned_dense_field(value, rows):
    if rows == 0:
        return False
    if _torch is not None and isinstance(value, _torch.Tensor):
        return tuple(value.shape[:1]) == (rows,)
    return isinstance(value, _np.ndarray) and value.dtype != object and value.shape[:1] == (rows,)


def _field_len(name, value):
    try:
        return len(value)
    except TypeError as e:
        raise ValueError("flat dict row-aligned field %r must be sized" % name) from e


def _flat_dict_row_count(data, field_schemas):
    """The batch size of a flat dict: from the fields a schema puts in a row section, else
    from its dense fields, else from its sequences (ambiguity is an error)."""
    sizes = {_field_len(n, data[n]) for n, s in field_schemas.items()
             if n in data and _schema_section(n, s) in ("batch", "non_tensor_batch")}
    if len(sizes) > 1:
        raise ValueError("flat dict fields have inconsistent batch sizes: %s" % sorted(sizes))
    if sizes:
        return sizes.pop(), True
    meta_fields = {n for n, s in field_schemas.items() if n in data and _schema_section(n, s) == "meta_info"}
    dense = {len(v) for k, v in data.items() if k not in meta_fields and _is_dense(v)}
    if len(dense) > 1:
        raise ValueError("flat dict dense fields have ambiguous batch sizes: %s" % sorted(dense))
    if dense:
        return dense.pop(), False
    seqs = {len(v) for k, v in data.items() if k not in meta_fields and (
        (isinstance(v, _np.ndarray) and v.ndim > 0) or _is_non_string_sequence(v))}
    if len(seqs) > 1:
        raise ValueError("flat dict fields have ambiguous batch sizes: %s; pass FieldSchema metadata['section'] "
                         "for list-valued metadata fields" % sorted(seqs))
    return (seqs.pop() if seqs else 0), False


def _coerce_flat_dict_non_tensor_field(name, value, rows, schema=None):
    if isinstance(value, _np.ndarray):
        if len(value) != rows:
            raise ValueError("flat dict non_tensor_batch field %r has batch size %d, expected %d"
                             % (name, len(value), rows))
        dtype = _schema_ndarray_dtype(schema) if schema is not None else None
        if (schema is not None and schema.codec == "ndarray" and dtype is not None
                and (value.dtype != object or all(v is not None for v in value))):
            return _np.asarray(value, dtype=dtype)
        return value
    if _is_non_string_sequence(value):
        if len(value) != rows:
            raise ValueError("flat dict non_tensor_batch field %r has batch size %d, expected %d"
                             % (name, len(value), rows))
        return _object_column(value)
    raise TypeError("flat dict non_tensor_batch field %r must be an ndarray or non-string sequence" % name)


def _flat_dict_to_envelope(data, field_schemas=None):
    """A flat dict split into sections: row-aligned tensors/arrays are batch, other
    row-aligned sequences non_tensor_batch, the rest meta_info (a FieldSchema section wins)."""
    if not isinstance(data, Mapping):
        raise TypeError("flat dict payload must be a mapping")
    field_schemas = field_schemas or {}
    rows, from_schema = _flat_dict_row_count(data, field_schemas)
    batch, non_tensor, meta = {}, {}, {}
    for key, value in data.items():
        schema = field_schemas.get(key)
        section = None if schema is None else _schema_section(key, schema)
        if section is None:
            if _is_row_aligned_dense_field(value, rows):
                section = "batch"
            elif not from_schema and _is_non_string_sequence(value) and len(value) == rows:
                section = "non_tensor_batch"
            else:
                section = "meta_info"
        if section == "batch":
            batch[key] = value
        elif section == "non_tensor_batch":
            non_tensor[key] = _coerce_flat_dict_non_tensor_field(key, value, rows, schema)
        else:
            meta[key] = value
    return {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": meta}


def _envelope_to_flat_dict(data):
    meta = _mapping_to_dict(data.get("meta_info"))
    batch = _mapping_to_dict(data.get("batch"))
    non_tensor = _mapping_to_dict(data.get("non_tensor_batch"))
    overlap = (set(meta) & set(batch)) | (set(meta) & set(non_tensor)) | (set(batch) & set(non_tensor))
    if overlap:
        raise ValueError("Duplicate keys found across DataProto sections: %s" % sorted(overlap))
    out = dict(meta)
    out.update(batch)
    for name, value in non_tensor.items():
        out[name] = value.tolist() if isinstance(value, _np.ndarray) and value.dtype == object else value
    return out


def _resolve_dataproto_field_selection(ref, fields, batch_fields, non_tensor_fields):
    if fields is not None and (batch_fields is not None or non_tensor_fields is not None):
        raise ValueError("fields cannot be combined with batch_fields or non_tensor_fields")
    if fields is not None:
        names = list(fields)
        _validate_dataproto_fields_exist(ref, names)
        return ([n for n in names if ref.field_index[n].section == "batch"],
                [n for n in names if ref.field_index[n].section == "non_tensor_batch"])
    if batch_fields is None and non_tensor_fields is None:
        batch = [n for n, loc in ref.field_index.items() if loc.section == "batch"]
        non_tensor = [n for n, loc in ref.field_index.items() if loc.section == "non_tensor_batch"]
    else:
        batch = list(batch_fields or [])
        non_tensor = list(non_tensor_fields or [])
    _validate_dataproto_fields_exist(ref, batch + non_tensor)
    return batch, non_tensor


def _validate_dataproto_fields_exist(ref, names):
    missing = [n for n in names if n not in ref.field_index]
    if missing:
        raise KeyError("unknown DataProto fields: %s" % missing)


def _slice_length(member_slice, total_rows):
    return len(_slice_rows(member_slice, total_rows))


def _normalize_dataproto_row_index(index, total_rows):
    if isinstance(index, bool) or not isinstance(index, (int, _np.integer)):
        raise TypeError("DataProto row indices must be integers")
    i = int(index)
    if i < 0:
        i += total_rows
    if not 0 <= i < total_rows:
        raise IndexError("DataProto row index %s out of range for %d rows" % (index, total_rows))
    return i


def _coerce_dataproto_row_selection(rows, total_rows):
    if rows is None:
        return None
    if isinstance(rows, StructuredMemberSlice):
        if rows.axis != 0:
            raise ValueError("DataProto row slicing currently supports axis=0 only")
        return _DataProtoRowSelection(_slice_length(rows, total_rows), member_slice=rows)
    if isinstance(rows, slice):
        start, end, step = rows.indices(total_rows)
        if step <= 0:
            raise ValueError("DataProto row slicing step must be positive")
        s = StructuredMemberSlice(axis=0, start=start, end=end, step=step)
        return _DataProtoRowSelection(_slice_length(s, total_rows), member_slice=s)
    if isinstance(rows, Sequence) and not isinstance(rows, (str, bytes, bytearray)) or isinstance(rows, _np.ndarray):
        idx = tuple(_normalize_dataproto_row_index(i, total_rows) for i in rows)
        return _DataProtoRowSelection(len(idx), indices=idx)
    raise TypeError("DataProto rows must be a slice, StructuredMemberSlice, or row index sequence")


def _select_mapping(value, keys):
    if keys is None:
        return dict(value)
    return {k: value[k] for k in keys if k in value}


def _dataproto_manifest_view(transfer, ref):
    manifests = {s: transfer._bundle_store.resolve_manifest(r) for s, r in ref.stage_refs.items()}
    metas = {s: transfer._bundle_store.read_metadata(m) for s, m in manifests.items()}
    fields = {}
    for name, loc in ref.field_index.items():
        specs = _structured_field_specs(metas[loc.stage])
        spec = dict(specs.get(loc.member, {"encoding": "bytes"}))
        enc = ref.encoded_non_tensor.get(name)
        if enc is not None:
            spec = {"encoding": "structured_non_tensor", "codec": enc["codec"], "metadata": enc.get("metadata"),
                    "payload_members": dict(enc["payload_members"]),
                    "payload_specs": {p: dict(specs.get(m, {"encoding": "bytes"}))
                                      for p, m in enc["payload_members"].items()}}
        fields[name] = {"section": loc.section, "stage": loc.stage, "member": loc.member, "spec": spec}
    return {
        "namespace": ref.namespace, "partition": ref.partition, "batch_size": ref.batch_size,
        "batch_fields": {n: f for n, f in fields.items() if f["section"] == "batch"},
        "non_tensor_fields": {n: f for n, f in fields.items() if f["section"] == "non_tensor_batch"},
        "meta_info_keys": list(ref.meta_info),
        "stages": {s: {"manifest_key": r.manifest_key, "dataproto": metas[s].get("dataproto", {})}
                   for s, r in ref.stage_refs.items()},
    }


# Per-row payload members of each codec (one entry per row) and its offsets members
# (rows + 1 entries, indexing into a data member).
_ROW_MEMBERS = {
    "ndarray": ("data", "nulls"),
    "typed_ragged": ("shapes", "ndims", "nulls"),
    "ragged_tensor": ("shapes", "ndims", "nulls"),
    "bytes_ragged": ("nulls",), "media_bytes": ("nulls",), "utf8_ragged": ("nulls",),
    "msgpack_ragged": ("nulls",), "json_ragged": ("nulls",),
    "media_list_ragged": ("nulls",),
}


class _EncodedRowReader(object):
    """Reads the payload of some rows of an encoded non-tensor column: per-row members by
    row gather, data members by the byte ranges the rows' offsets name."""

    def __init__(self, layer, manifest, field_specs):
        self._layer = layer
        self._manifest = manifest
        self._specs = field_specs

    def _member(self, member, rows):
        spec = self._specs.get(member, {"encoding": "bytes"})
        return self._layer.read_member(member, self._manifest["buffers"][member], spec, indices=rows)

    def _offsets(self, member, rows):
        """(ranges of elements per row, new offsets) for rows of an offsets member."""
        pairs = self._member(member, [i for r in rows for i in (r, r + 1)]) if rows else _np.zeros(0, _np.int64)
        starts, ends = pairs[0::2], pairs[1::2]
        lengths = ends - starts
        new = _np.zeros(len(rows) + 1, dtype=_np.int64)
        _np.cumsum(lengths, out=new[1:])
        return list(zip(starts.tolist(), ends.tolist())), new

    def _gather(self, member, spans, itemsize, dtype=None):
        """Elements [start, end) of each span, concatenated (bytes, or an array of dtype)."""
        total = sum(e - s for s, e in spans) * itemsize
        out = bytearray(total)
        ranges, pos = [], 0
        for s, e in spans:
            n = (e - s) * itemsize
            if n:
                ranges.append((s * itemsize, pos, n))
                pos += n
        self._layer._transport.read_ranges_into(self._manifest["buffers"][member], out, ranges, allow_get_into=False)
        if dtype is None:
            return bytes(out)
        return _np.frombuffer(out, dtype=dtype).copy()

    def read(self, encoded, rows):
        codec = encoded["codec"]
        members = encoded["payload_members"]
        meta = copy.deepcopy(dict(encoded.get("metadata") or {}))
        if codec == "structured_recursive":
            payload = {}
            for node in meta.get("nodes", []):
                for key in ("missing_payload", "row_mask_payload", "lengths_payload"):
                    name = node.get(key)
                    if name is not None:
                        payload[name] = self._member(members[name], rows)
            for leaf in meta.get("leaves", []):
                lm = leaf["payload_members"]
                sub = {"codec": leaf["codec"], "metadata": leaf.get("metadata") or {},
                       "payload_members": {n: members[g] for n, g in lm.items() if n != "missing"}}
                sub_payload, leaf["metadata"] = self.read(sub, rows)
                for n, v in sub_payload.items():
                    payload[lm[n]] = v
                payload[lm["missing"]] = self._member(members[lm["missing"]], rows)
            return payload, meta
        if codec == "ragged_tensor_dict":
            payload = {"null_mask": self._member(members["null_mask"], rows)}
            codecs = dict(meta.get("key_codecs") or {})
            for key in _normalize_ragged_tensor_dict_keys(meta.get("keys", [])):
                sub = {"codec": "ragged_tensor", "metadata": codecs.get(key) or {},
                       "payload_members": _ragged_tensor_dict_payload_items(members, key, kind="manifest")}
                sub_payload, codecs[key] = self.read(sub, rows)
                for n, v in sub_payload.items():
                    payload["%s.%s" % (key, n)] = v
            meta["key_codecs"] = codecs
            return payload, meta
        if codec not in _ROW_MEMBERS:
            raise ValueError("unknown structured non-tensor codec: %s" % codec)
        payload = {n: self._member(members[n], rows) for n in _ROW_MEMBERS[codec]}
        if codec == "ndarray":
            return payload, meta
        if codec in ("typed_ragged", "ragged_tensor"):
            spans, payload["offsets"] = self._offsets(members["offsets"], rows)
            dspec = self._specs.get(members["data"], {})
            dtype = _np.dtype(dspec.get("dtype", "u1"))
            payload["data"] = self._gather(members["data"], spans, dtype.itemsize, dtype)
            if meta.get("ndarray_rows"):
                meta["ndarray_rows"] = [meta["ndarray_rows"][r] for r in rows]
            return payload, meta
        if codec == "media_list_ragged":
            item_spans, payload["row_offsets"] = self._offsets(members["row_offsets"], rows)
            items = [i for s, e in item_spans for i in range(s, e)]
            byte_spans, payload["byte_offsets"] = self._offsets(members["byte_offsets"], items)
            payload["data"] = self._gather(members["data"], byte_spans, 1)
            if "media_encodings" in meta:
                meta["media_encodings"] = [meta["media_encodings"][i] for i in items]
            return payload, meta
        spans, payload["offsets"] = self._offsets(members["offsets"], rows)
        payload["data"] = self._gather(members["data"], spans, 1)
        if "media_encodings" in meta:
            meta["media_encodings"] = [meta["media_encodings"][r] for r in rows]
        return payload, meta


# ---------------------------------------------------------------------------
# The transfer
# ---------------------------------------------------------------------------

class MooncakeBundleTransfer(object):
    """Structured objects and DataProto stages through a Mooncake store (any object with
    ``put``/``get``/``remove``; the store's zero-copy calls are used where it has them)."""

    def __init__(self, store, key_prefix="bundle", default_chunk_bytes=DEFAULT_BUNDLE_CHUNK_BYTES, buffer_pool=None):
        self.store = store
        self.key_prefix = _normalize_key_prefix(key_prefix)
        self.default_chunk_bytes = _validate_chunk_bytes(default_chunk_bytes)
        self._transport = _PayloadTransport(store, buffer_pool=buffer_pool)
        self._bundle_store = _BundleManifestStore(store, self._transport, self.key_prefix, self.default_chunk_bytes)
        self._structured_store = _StructuredObjectLayer(self._bundle_store)

    # -- bundles and structured objects -------------------------------------------------

    def put_bundle(self, meta, buffers, partition="default", chunk_bytes=None, policy=None, max_inflight_put=None,
                   config=None):
        """Raw metadata bytes plus named byte buffers as one bundle."""
        return self._bundle_store.put_bundle(meta, buffers, partition, chunk_bytes, policy, max_inflight_put,
                                             config=config)

    def remove_bundle(self, ref):
        """Removes every key of a bundle (payload chunks, metadata, manifest)."""
        self._bundle_store.remove_bundle(ref)

    def put_structured_object(self, payload, partition="default", chunk_bytes=None, policy=None,
                              max_inflight_put=None, config=None):
        """JSON metadata plus members (ndarrays, torch tensors, bytes-like values)."""
        return self._structured_store.put_structured_object(payload, partition, chunk_bytes, policy,
                                                            max_inflight_put, config=config)

    def put_object(self, obj, partition="default", chunk_bytes=None, policy=None, max_inflight_put=None, config=None):
        """A mapping of members, or one tensor/array (read back by ``get_object``)."""
        if isinstance(obj, Mapping):
            payload = StructuredObjectPayload(metadata={}, buffers=obj)
        else:
            payload = StructuredObjectPayload(metadata={"__mooncake_wrapped_object__": True}, buffers={"value": obj})
        return self.put_structured_object(payload, partition=partition, chunk_bytes=chunk_bytes, policy=policy,
                                          max_inflight_put=max_inflight_put, config=config)

    def get_object(self, ref):
        result = self.materialize(self.read_spec(ref))
        if result.metadata.get("__mooncake_wrapped_object__"):
            return result.objects["value"]
        return result.objects

    def read_spec(self, ref):
        return self._structured_store.read_spec(ref)

    def materialize(self, spec):
        return self._structured_store.materialize(spec)

    def materialize_into(self, spec, destinations):
        return self._structured_store.materialize_into(spec, destinations)

    @staticmethod
    def release_result(result):
        """Releases the pool leases behind the arrays of a result (each once), walking
        dicts, lists, tuples and object arrays."""
        released, seen = set(), set()

        def visit(value):
            owner = getattr(value, "_mooncake_pool_owner", None)
            if owner is not None:
                if id(owner) not in released:
                    released.add(id(owner))
                    owner.release()
                return
            if isinstance(value, Mapping):
                children = value.values()
            elif isinstance(value, (list, tuple)):
                children = value
            elif isinstance(value, _np.ndarray) and value.dtype == object:
                children = value.flat
            else:
                return
            if id(value) in seen:
                return
            seen.add(id(value))
            for child in children:
                visit(child)

        visit(result)

    # -- DataProto ----------------------------------------------------------------------

    def put(self, data, *, type="dataproto", namespace="default", partition="default", stage="default",
            chunk_bytes=None, policy=None, config=None, field_schemas=None):
        """A DataProto-like object (``type="dataproto"``) or a flat dict (``"dict"``)."""
        if type == "dataproto":
            stage_data = data
        elif type == "dict":
            stage_data = _flat_dict_to_envelope(data, field_schemas)
        else:
            raise ValueError("unsupported Mooncake payload type: %r" % (type,))
        return self._put_dataproto_stage(None, stage_data, namespace=namespace, partition=partition, stage=stage,
                                         chunk_bytes=chunk_bytes, policy=policy, overwrite=False, config=config,
                                         field_schemas=field_schemas)

    def get(self, ref, *, type="dataproto", fields=None, batch_fields=None, non_tensor_fields=None,
            meta_info_keys=None, data_cls=None, destinations=None, rows=None):
        if type not in ("dataproto", "dict"):
            raise ValueError("unsupported Mooncake payload type: %r" % (type,))
        result = self._get_dataproto(ref, fields=fields, batch_fields=batch_fields,
                                     non_tensor_fields=non_tensor_fields, meta_info_keys=meta_info_keys,
                                     data_cls=dict if type == "dict" else data_cls, destinations=destinations,
                                     rows=rows, _flat_dict_output=(type == "dict"))
        return _envelope_to_flat_dict(result) if type == "dict" else result

    def put_dataproto(self, data, *, namespace="default", partition="default", stage="default", chunk_bytes=None,
                      policy=None, field_schemas=None, config=None):
        return self.put(data, type="dataproto", namespace=namespace, partition=partition, stage=stage,
                        chunk_bytes=chunk_bytes, policy=policy, field_schemas=field_schemas, config=config)

    def append_dataproto_fields(self, ref, data, *, stage, overwrite=False, chunk_bytes=None, policy=None,
                                field_schemas=None, config=None):
        ref = _resolve_dataproto_ref(ref)
        return self._put_dataproto_stage(ref, data, namespace=ref.namespace, partition=ref.partition, stage=stage,
                                         chunk_bytes=chunk_bytes, policy=policy, overwrite=overwrite,
                                         field_schemas=field_schemas, config=config)

    def dataproto_manifest_view(self, ref):
        return _dataproto_manifest_view(self, _resolve_dataproto_ref(ref))

    def get_dataproto(self, ref, *, fields=None, batch_fields=None, non_tensor_fields=None, meta_info_keys=None,
                      data_cls=None, destinations=None, rows=None):
        return self._get_dataproto(ref, fields=fields, batch_fields=batch_fields, non_tensor_fields=non_tensor_fields,
                                   meta_info_keys=meta_info_keys, data_cls=data_cls, destinations=destinations,
                                   rows=rows)

    def cleanup_dataproto(self, ref):
        """Removes every stage object of a ref (or exported handle)."""
        ref = _resolve_dataproto_ref(ref)
        done = set()
        for stage_ref in ref.stage_refs.values():
            if stage_ref.manifest_key not in done:
                done.add(stage_ref.manifest_key)
                self.remove_bundle(stage_ref)

    def _new_storage_group_id(self, config):
        """The storage group of a new DataProto: the config's one group id, a fresh opaque
        one when it names none, or None (ungrouped) for an explicit empty id."""
        raw = getattr(config, "group_ids", None)
        if raw is None:
            gid = None
        elif isinstance(raw, str):
            gid = raw
        else:
            try:
                ids = list(raw)
            except TypeError as e:
                raise ValueError("structured object store config.group_ids must contain strings") from e
            if len(ids) > 1:
                raise ValueError(_GROUP_ERROR)
            gid = ids[0] if ids else None
        if gid is None:
            return "structured-%s" % uuid.uuid4().hex
        if not isinstance(gid, str):
            raise ValueError("structured object store config.group_ids must contain strings")
        return gid or None

    def _encode_stage_fields(self, stage, batch, non_tensor_batch, field_schemas):
        buffers, locations, encoded_updates = {}, {}, {}
        for name, value in batch.items():
            buffers["batch." + name] = value
            locations[name] = StructuredFieldLocation(stage, "batch." + name, "batch")
        for name, value in non_tensor_batch.items():
            member = "non_tensor_batch." + name
            path = "non_tensor_batch." + name
            schema = _schema_for_section(field_schemas, name, "non_tensor_batch")
            encoded = None
            if schema is not None:
                try:
                    column = _coerce_schema_non_tensor_value(name, value)
                    if schema.codec == "auto":
                        _validate_schema_nullable(path, column, schema)
                    else:
                        encoded = _encode_with_schema(path, column, schema)
                except (TypeError, ValueError, RuntimeError, AttributeError) as e:
                    raise type(e)("failed to encode non_tensor_batch field %r with FieldSchema codec %r: %s"
                                  % (name, schema.codec, e)) from e
            if encoded is None and _should_encode_non_tensor_field(value):
                encoded = _encode_structured_non_tensor_field(path, value)
            locations[name] = StructuredFieldLocation(stage, member, "non_tensor_batch")
            if encoded is None:
                buffers[member] = value
                continue
            members = {}
            for pname, pvalue in encoded.payload.items():
                buffers["%s.%s" % (member, pname)] = pvalue
                members[pname] = "%s.%s" % (member, pname)
            encoded_updates[name] = {"codec": encoded.codec, "rows": encoded.rows, "metadata": encoded.metadata,
                                     "payload_members": members}
        return buffers, locations, encoded_updates

    def _put_dataproto_stage(self, ref, data, *, namespace, partition, stage, chunk_bytes, policy, overwrite,
                             field_schemas=None, config=None):
        batch, non_tensor_batch, meta_info = _split_dataproto_like(data)
        _validate_dataproto_schema_sections(batch, non_tensor_batch, meta_info, field_schemas)
        batch_size = _dataproto_batch_size(batch, non_tensor_batch)
        if ref is not None and batch_size != ref.batch_size:
            raise ValueError("DataProto append batch size %d does not match ref batch size %d"
                             % (batch_size, ref.batch_size))
        both = sorted(set(batch) & set(non_tensor_batch))
        if both:
            raise ValueError("DataProto batch and non_tensor_batch fields overlap: %s" % both)
        buffers, locations, encoded_updates = self._encode_stage_fields(stage, batch, non_tensor_batch, field_schemas)
        if not buffers:
            if ref is not None:
                merged = dict(ref.meta_info)
                merged.update(meta_info)
                return MooncakeDataProtoRef(batch_size=ref.batch_size, stage_refs=dict(ref.stage_refs),
                                            field_index=dict(ref.field_index), meta_info=merged,
                                            namespace=ref.namespace, partition=ref.partition,
                                            global_indexes=ref.global_indexes,
                                            encoded_non_tensor=dict(ref.encoded_non_tensor),
                                            _storage_group_id=ref._storage_group_id)
            return MooncakeDataProtoRef(batch_size=batch_size, stage_refs={}, field_index={},
                                        meta_info=dict(meta_info), namespace=namespace, partition=partition,
                                        encoded_non_tensor={}, _storage_group_id=self._new_storage_group_id(config))
        if ref is not None:
            dup = sorted(set(ref.field_index) & set(locations))
            if dup and not overwrite:
                raise ValueError("DataProto fields already exist: %s" % dup)
            if overwrite:
                left = sorted(n for n, loc in ref.field_index.items() if loc.stage == stage and n not in locations)
                if left:
                    raise ValueError("DataProto overwrite for stage %r must include existing fields: %s"
                                     % (stage, left))
        group_id = self._new_storage_group_id(config) if ref is None else ref._storage_group_id
        effective = config if group_id is None else _config_with_group_id(
            config, group_id, getattr(_mooncake_store, "ReplicateConfig", None))
        payload = StructuredObjectPayload(
            metadata={"layout": "dataproto_stage",
                      "dataproto": {"version": 1, "namespace": namespace, "partition": partition, "stage": stage,
                                    "batch_size": batch_size}},
            buffers=buffers)
        existing = ref.stage_refs.get(stage) if ref is not None else None
        if existing is not None and not overwrite:
            stage_ref = self._append_dataproto_stage_manifest(existing, payload, partition=partition,
                                                              chunk_bytes=chunk_bytes, policy=policy,
                                                              config=effective)
        else:
            stage_ref = self.put_structured_object(payload, partition=partition, chunk_bytes=chunk_bytes,
                                                   policy=policy, config=effective)
            if existing is not None and existing.manifest_key != stage_ref.manifest_key:
                self.remove_bundle(existing)
        if ref is None:
            stage_refs, field_index, meta, encoded = {stage: stage_ref}, dict(locations), dict(meta_info), \
                dict(encoded_updates)
        else:
            stage_refs = dict(ref.stage_refs)
            stage_refs[stage] = stage_ref
            field_index = dict(ref.field_index)
            field_index.update(locations)
            meta = dict(ref.meta_info)
            meta.update(meta_info)
            encoded = {n: e for n, e in ref.encoded_non_tensor.items() if n not in locations}
            encoded.update(encoded_updates)
        return MooncakeDataProtoRef(batch_size=batch_size, stage_refs=stage_refs, field_index=field_index,
                                    meta_info=meta, namespace=namespace, partition=partition,
                                    global_indexes=None if ref is None else ref.global_indexes,
                                    encoded_non_tensor=encoded, _storage_group_id=group_id)

    def _append_dataproto_stage_manifest(self, old_ref, payload, *, partition, chunk_bytes, policy, config=None):
        """New fields of an existing stage: written as a new object, then one manifest over
        the old and new members replaces both (the old manifests are kept as its cleanup
        keys, so removing it removes everything)."""
        bs = self._bundle_store
        new_ref = self.put_structured_object(payload, partition=partition, chunk_bytes=chunk_bytes, policy=policy,
                                             config=config)
        try:
            old_manifest, new_manifest = bs.resolve_manifest(old_ref), bs.resolve_manifest(new_ref)
            merged_meta = _merge_structured_stage_metadata(bs.read_metadata(old_manifest),
                                                           bs.read_metadata(new_manifest))
            buffers = dict(old_manifest["buffers"])
            clash = sorted(set(buffers) & set(new_manifest["buffers"]))
            if clash:
                raise ValueError("structured members already exist: %s" % clash)
            buffers.update(new_manifest["buffers"])
            cleanup = (list(old_manifest.get("cleanup_keys", [])) + [bs.manifest_key(old_ref)]
                       + bs.payload_keys(old_manifest["meta"]) + [bs.manifest_key(new_ref)]
                       + bs.payload_keys(new_manifest["meta"]))
            merged = bs.put_bundle_manifest(_encode_structured_metadata(merged_meta), buffers, partition=partition,
                                            chunk_bytes=chunk_bytes, policy=policy, cleanup_keys=cleanup,
                                            config=config)
        except BaseException:
            self.remove_bundle(new_ref)
            raise
        bs.remove_keys([bs.manifest_key(new_ref)] + bs.payload_keys(new_manifest["meta"]), strict=False)
        return merged

    def _stage_view(self, stage_ref):
        manifest = self._bundle_store.resolve_manifest(stage_ref)
        return manifest, _structured_field_specs(self._bundle_store.read_metadata(manifest))

    def _get_dataproto(self, ref, *, fields=None, batch_fields=None, non_tensor_fields=None, meta_info_keys=None,
                       data_cls=None, destinations=None, rows=None, _flat_dict_output=False):
        ref = _resolve_dataproto_ref(ref)
        selection = _coerce_dataproto_row_selection(rows, ref.batch_size)
        batch_names, non_tensor_names = _resolve_dataproto_field_selection(ref, fields, batch_fields,
                                                                           non_tensor_fields)
        dests = destinations or {}
        out = {"batch": {}, "non_tensor_batch": {}}
        plain, encoded = {}, {}
        for name in batch_names + non_tensor_names:
            loc = ref.field_index[name]
            if loc.section == "non_tensor_batch" and name in ref.encoded_non_tensor:
                encoded.setdefault(loc.stage, []).append(name)
            else:
                plain.setdefault(loc.stage, []).append(name)
        for stage, names in plain.items():
            stage_ref = ref.stage_refs[stage]
            if selection is None or selection.indices is None:
                members = [ref.field_index[n].member for n in names]
                spec = self.read_spec(stage_ref).select_members(members)
                if selection is not None:
                    s = selection.member_slice
                    for m in members:
                        spec = spec.slice_member(m, axis=s.axis, start=s.start, end=s.end, step=s.step)
                result = self.materialize_into(spec, {ref.field_index[n].member: dests[n] for n in names if n in dests})
                for n in names:
                    out[ref.field_index[n].section][n] = result.objects[ref.field_index[n].member]
                continue
            manifest, specs = self._stage_view(stage_ref)
            for n in names:
                member = ref.field_index[n].member
                spec = specs.get(member, {"encoding": "bytes"})
                if spec.get("encoding", "bytes") not in ("ndarray", "torch_tensor"):
                    raise ValueError("structured member %s does not support indexed rows" % member)
                out[ref.field_index[n].section][n] = self._structured_store.read_member(
                    member, manifest["buffers"][member], spec, destination=dests.get(n),
                    indices=list(selection.indices))
        for stage, names in encoded.items():
            stage_ref = ref.stage_refs[stage]
            if selection is None:
                wanted = [m for n in names for m in ref.encoded_non_tensor[n]["payload_members"].values()]
                objects = self.materialize(self.read_spec(stage_ref).select_members(wanted)).objects
                for n in names:
                    enc = ref.encoded_non_tensor[n]
                    payload = {p: objects[m] for p, m in enc["payload_members"].items()}
                    values = _decode_structured_non_tensor_encoded(enc, payload, ref.batch_size, enc.get("metadata"))
                    out["non_tensor_batch"][n] = values if _flat_dict_output else _object_array_from_decoded_values(
                        values)
                continue
            if selection.indices is not None:
                rows_list = list(selection.indices)
            else:
                start, end, step = _normalized_member_slice(selection.member_slice, ref.batch_size)
                if step != 1:
                    raise ValueError("DataProto structured non-tensor slicing currently requires step=1")
                rows_list = list(range(start, end))
            manifest, specs = self._stage_view(stage_ref)
            reader = _EncodedRowReader(self._structured_store, manifest, specs)
            for n in names:
                enc = ref.encoded_non_tensor[n]
                payload, meta = reader.read(enc, rows_list)
                values = _decode_structured_non_tensor_encoded(enc, payload, len(rows_list), meta)
                out["non_tensor_batch"][n] = values if _flat_dict_output else _object_array_from_decoded_values(values)
        return _build_dataproto_like_result(out["batch"], out["non_tensor_batch"],
                                            _select_mapping(ref.meta_info, meta_info_keys), data_cls)
