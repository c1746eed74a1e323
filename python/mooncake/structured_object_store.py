"""mooncake.structured_object_store: the codec inference of Mooncake's structured object store.

Mooncake's module stores batches of rows (DataProto-like dicts of tensors, numbers, strings,
bytes, nested dicts and lists) as named buffers in the store. Its first step is the one here:
``infer_structure`` expands a column of row values into interior nodes (dicts and short
lists of containers) and leaves, and ``_choose_leaf_codec`` picks how each leaf column would
be encoded (``ragged_tensor``, ``typed_ragged``, ``ndarray``, ``bytes_ragged``,
``utf8_ragged``, ``media_list_ragged``, ``media_bytes``, ``msgpack_ragged``), with Mooncake's
codec names, decisions and path syntax (``root.key``, ``root[0]``, ``\\.``/``\\[`` escapes).
A key absent from a row is ``MISSING`` in its child column, distinct from a ``None`` value.

Not here (docs/python.md): the bundle transfer itself (``MooncakeBundleTransfer``,
``put_dataproto``/``get_dataproto``, manifests, ``RemoteBundleRef``), which needs Mooncake's
byte layout of every codec to interoperate. torch and numpy are optional for inference
(torch tensors are recognised when torch is installed).
"""

from dataclasses import dataclass, field
from typing import Any, Optional

try:
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is a dependency of the tensor API
    _np = None

try:
    import torch as _torch
except Exception:  # pragma: no cover - torch is optional
    _torch = None

__all__ = ["MISSING", "MISSING_OBJECT_ERROR", "STRUCTURED_FIELD_SPECS_KEY", "DEFAULT_BUNDLE_CHUNK_BYTES",
           "infer_structure"]

DEFAULT_BUNDLE_CHUNK_BYTES = 64 << 20
MISSING_OBJECT_ERROR = -704  # what remove answers for a key that is already gone
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


# The data types and DataProto ref handles (plain data; the transfer of bundles is not here).
from ._structured_types import *  # noqa: E402,F401,F403
from ._structured_types import __all__ as _types_all  # noqa: E402

__all__ = __all__ + list(_types_all)
