"""The tensor API of MooncakeDistributedStore, in pure Python over put/get.

A tensor is stored as one object: Mooncake's 304-byte tensor header (dtype, shape,
layout) followed by the raw element bytes, the layout Mooncake's
``integration_utils.h`` defines, so a tensor put by this package is read by
another client (ours or Mooncake's) and the other way round:

    header (40 bytes, little endian):
        u32 magic 0x4d4f4f4e, u16 version 1, u16 header_size 304,
        i32 dtype, i32 ndim, u32 layout_kind (0 full, 1 shard), u32 flags,
        u64 data_offset (304), u64 data_bytes
    layout (264 bytes):
        i64 global_shape[8], i64 local_shape[8]   (unused dims are -1)
        u32 axis_count, u32 reserved
        4 axes of {i32 kind (0 DP, 1 TP, 2 EP, 3 PP), i32 axis_index,
                   i32 shard_rank, i32 shard_count, i32 split_dim,
                   i32 reserved (expert/stage id), i64 local split extent}

CPU torch tensors and numpy arrays are accepted wherever Mooncake takes a
tensor; reads return torch tensors when torch is importable, numpy arrays
otherwise. Tensor parallel shards are stored under ``<key>_tp_<rank>`` (uniform
split along ``split_dim``), parallelism descriptors name their shard keys as
Mooncake does (``<key>__tp_0of2_sd0__...``, writer partitions
``<key>__writer_<r>of<n>_sd<d>``).
"""

import ctypes
import json
import logging
import struct

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is a dependency of the tests
    np = None

log = logging.getLogger("mooncake")

MAGIC = 0x4d4f4f4e
VERSION = 1
MAX_DIMS = 8
MAX_AXES = 4
_HDR = struct.Struct("<IHHiiIIQQ")
_SHAPE = struct.Struct("<8q")
_AXCNT = struct.Struct("<II")
_AXIS = struct.Struct("<iiiiiiq")
HEADER_SIZE = _HDR.size + 2 * _SHAPE.size + _AXCNT.size + MAX_AXES * _AXIS.size  # 304

LAYOUT_FULL = 0
LAYOUT_SHARD = 1
AXIS_KINDS = {"DP": 0, "TP": 1, "EP": 2, "PP": 3}
_AXIS_NAMES = {v: k.lower() for k, v in AXIS_KINDS.items()}
_AXIS_ORDER = {"DP": 0, "TP": 1, "EP": 2, "PP": 3}

# Mooncake's TensorDtype values: (name, element size, numpy storage dtype, torch dtype name)
_DTYPES = [
    ("float32", 4, "float32", "float32"),
    ("float64", 8, "float64", "float64"),
    ("int8", 1, "int8", "int8"),
    ("uint8", 1, "uint8", "uint8"),
    ("int16", 2, "int16", "int16"),
    ("uint16", 2, "uint16", "uint16"),
    ("int32", 4, "int32", "int32"),
    ("uint32", 4, "uint32", "uint32"),
    ("int64", 8, "int64", "int64"),
    ("uint64", 8, "uint64", "uint64"),
    ("bool", 1, "bool", "bool"),
    ("float16", 2, "uint16", "float16"),
    ("bfloat16", 2, "uint16", "bfloat16"),
    ("float8_e4m3fn", 1, "uint8", "float8_e4m3fn"),
    ("float8_e5m2", 1, "uint8", "float8_e5m2"),
]
_DTYPE_CODE = {d[0]: i for i, d in enumerate(_DTYPES)}
# numpy has a native float16; everything else numpy names maps by name.
_NP_NATIVE = {"float16": "float16"}


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


class TensorError(ValueError):
    pass


class Header(object):
    """A parsed tensor header."""

    __slots__ = ("dtype", "ndim", "layout_kind", "data_offset", "data_bytes", "global_shape", "local_shape",
                 "axes")

    def __init__(self, dtype, global_shape, local_shape=None, layout_kind=LAYOUT_FULL, axes=()):
        self.dtype = int(dtype)
        self.global_shape = [int(d) for d in global_shape]
        self.local_shape = [int(d) for d in (global_shape if local_shape is None else local_shape)]
        self.ndim = len(self.global_shape)
        self.layout_kind = layout_kind
        self.axes = list(axes)  # tuples (kind, axis_index, rank, count, split_dim, reserved0, reserved1)
        self.data_offset = HEADER_SIZE
        self.data_bytes = expected_bytes(self.dtype, self.local_shape)

    def pack(self):
        if self.ndim > MAX_DIMS or len(self.axes) > MAX_AXES:
            raise TensorError("tensor has more than %d dims or %d axes" % (MAX_DIMS, MAX_AXES))
        out = bytearray(HEADER_SIZE)
        _HDR.pack_into(out, 0, MAGIC, VERSION, HEADER_SIZE, self.dtype, self.ndim, self.layout_kind, 0,
                       self.data_offset, self.data_bytes)
        off = _HDR.size
        for shape in (self.global_shape, self.local_shape):
            _SHAPE.pack_into(out, off, *(list(shape) + [-1] * (MAX_DIMS - len(shape))))
            off += _SHAPE.size
        _AXCNT.pack_into(out, off, len(self.axes), 0)
        off += _AXCNT.size
        for ax in self.axes:
            _AXIS.pack_into(out, off, *ax)
            off += _AXIS.size
        return bytes(out)

    @classmethod
    def parse(cls, buf, total):
        """Parses and validates the header at the start of buf (total bytes in the object)."""
        if total < HEADER_SIZE:
            raise TensorError("object of %d bytes is too small for a tensor header" % total)
        mv = memoryview(buf)[:HEADER_SIZE]
        magic, version, hsize, dtype, ndim, kind, _flags, doff, dbytes = _HDR.unpack_from(mv, 0)
        if magic != MAGIC or version != VERSION or hsize != HEADER_SIZE:
            raise TensorError("not a Mooncake tensor object")
        if not (0 <= dtype < len(_DTYPES)) or not (0 <= ndim <= MAX_DIMS) or kind > LAYOUT_SHARD:
            raise TensorError("invalid tensor header")
        off = _HDR.size
        g = list(_SHAPE.unpack_from(mv, off))
        loc = list(_SHAPE.unpack_from(mv, off + _SHAPE.size))
        off += 2 * _SHAPE.size
        nax, _ = _AXCNT.unpack_from(mv, off)
        off += _AXCNT.size
        if nax > MAX_AXES:
            raise TensorError("invalid tensor layout")
        axes = [_AXIS.unpack_from(mv, off + i * _AXIS.size) for i in range(nax)]
        if doff < HEADER_SIZE or doff > total or dbytes != total - doff:
            raise TensorError("tensor header does not match the object size")
        if any(d < 0 for d in g[:ndim] + loc[:ndim]) or any(d != -1 for d in g[ndim:] + loc[ndim:]):
            raise TensorError("invalid tensor shape")
        h = cls(dtype, g[:ndim], loc[:ndim], kind, axes)
        h.data_offset = doff
        if dbytes != h.data_bytes:
            raise TensorError("tensor data size does not match its shape and dtype")
        for ax in axes:
            if not (0 <= ax[0] <= 4) or ax[3] <= 0 or not (0 <= ax[2] < ax[3]) or not (-1 <= ax[4] < ndim):
                raise TensorError("invalid tensor layout axis")
        return h


def expected_bytes(dtype, shape):
    n = _DTYPES[dtype][1]
    for d in shape:
        n *= int(d)
    return n


def _is_torch(t):
    return "Tensor" in type(t).__name__ and hasattr(t, "data_ptr")


def dtype_code(t):
    """Mooncake's dtype code of a torch tensor or numpy array, or -1."""
    if _is_torch(t):
        name = str(t.dtype).replace("torch.", "")
    elif np is not None and isinstance(t, np.ndarray):
        name = t.dtype.name
    else:
        return -1
    return _DTYPE_CODE.get(name, -1)


class Inspected(object):
    """A tensor made contiguous, with its header, data address and size; owner keeps it alive."""

    __slots__ = ("owner", "header", "ptr", "nbytes")

    def __init__(self, owner, header, ptr, nbytes):
        self.owner, self.header, self.ptr, self.nbytes = owner, header, ptr, nbytes


def shape_of(t):
    return [int(d) for d in t.shape]


def inspect(t, what="tensor", require_contiguous=False):
    """An Inspected for a torch tensor or numpy array; TensorError when unsupported.

    A CUDA tensor is copied to host memory first (the object is encoded and
    checksummed there); other devices are refused.
    """
    if _is_torch(t):
        dev = str(getattr(t, "device", "cpu"))
        if dev.startswith("cuda"):
            t = t.detach().to("cpu")
        elif dev != "cpu":
            raise TensorError("%s is on %s: only CPU and CUDA tensors are supported" % (what, t.device))
        if require_contiguous and not t.is_contiguous():
            raise TensorError("%s must be contiguous" % what)
        t = t.contiguous()
        ptr, nbytes = int(t.data_ptr()), int(t.numel() * t.element_size())
    elif np is not None and isinstance(t, np.ndarray):
        if require_contiguous and not t.flags.c_contiguous:
            raise TensorError("%s must be contiguous" % what)
        t = np.ascontiguousarray(t)
        ptr, nbytes = int(t.ctypes.data), int(t.nbytes)
    else:
        raise TensorError("%s is not a PyTorch tensor or numpy array (got %s)" % (what, type(t).__name__))
    code = dtype_code(t)
    if code < 0:
        raise TensorError("%s: unsupported dtype %s" % (what, t.dtype))
    if len(t.shape) > MAX_DIMS:
        raise TensorError("%s has more than %d dimensions" % (what, MAX_DIMS))
    return Inspected(t, Header(code, shape_of(t)), ptr, nbytes)


def encode(ins):
    """The object bytes (header + data) of an Inspected, as a bytearray."""
    out = bytearray(HEADER_SIZE + ins.nbytes)
    out[:HEADER_SIZE] = ins.header.pack()
    if ins.nbytes:
        ctypes.memmove((ctypes.c_char * ins.nbytes).from_buffer(out, HEADER_SIZE), ins.ptr, ins.nbytes)
    return out


def decode(buf, total=None, copy=False):
    """A tensor (torch when available, else numpy) from the object bytes in buf.

    buf is bytes, a bytearray or a writable buffer; without copy the result views
    buf's memory (the caller keeps it alive, as Mooncake's *_into calls do).
    """
    if total is None:
        total = len(memoryview(buf).cast("B"))
    h = Header.parse(buf, total)
    name, _size, storage, tname = _DTYPES[h.dtype]
    npdt = np.dtype(_NP_NATIVE.get(name, storage))
    mv = memoryview(buf).cast("B")[h.data_offset:h.data_offset + h.data_bytes]
    if copy or mv.readonly:
        arr = np.frombuffer(bytearray(mv), dtype=npdt)
    else:
        arr = np.frombuffer(mv, dtype=npdt)
    arr = arr.reshape(h.local_shape)
    torch = _torch()
    tdt = getattr(torch, tname, None) if torch is not None else None
    if tdt is None:
        # no torch, or a torch without this dtype (older ones lack uint16/32/64)
        if storage != name and name not in _NP_NATIVE:
            raise TensorError("dtype %s needs a torch that has it" % name)
        return arr
    if h.data_bytes == 0:
        return torch.empty(h.local_shape, dtype=tdt)
    if arr.dtype.kind == "u" and arr.dtype.itemsize > 1:
        arr = arr.view(arr.dtype.str.replace("u", "i"))  # torch.from_numpy takes signed storage only
    t = torch.from_numpy(arr)
    if t.dtype != tdt:
        t = t.view(tdt)
    return t


def decode_at(ptr, total):
    """A tensor viewing process memory [ptr, +total) (the *_into calls).

    In device memory (a CUDA buffer): a CUDA tensor viewing the buffer when
    torch has CUDA, else a host copy; the header is read with the driver.
    """
    from . import _cuda
    dev = _cuda.device_of(ptr) if total else -1
    if dev >= 0:
        return _decode_device(ptr, total, dev)
    buf = (ctypes.c_char * total).from_address(ptr) if total else bytearray()
    return decode(buf, total)


class _CudaArray(object):
    """Device memory described by __cuda_array_interface__ (torch.as_tensor views it)."""

    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (int(ptr), False),
                                         "version": 3, "strides": None}


def _decode_device(ptr, total, dev):
    from . import _cuda
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return decode(bytearray(_cuda.to_host(ptr, total)), total)  # no CUDA torch: a host copy
    h = Header.parse(_cuda.to_host(ptr, min(total, HEADER_SIZE)), total)
    name, _size, storage, tname = _DTYPES[h.dtype]
    tdt = getattr(torch, tname, None)
    if tdt is None:
        raise TensorError("dtype %s needs a torch that has it" % name)
    if h.data_bytes == 0:
        return torch.empty(h.local_shape, dtype=tdt, device="cuda:%d" % dev)
    raw = torch.as_tensor(_CudaArray(ptr + h.data_offset, (h.data_bytes,), "|u1"), device="cuda:%d" % dev)
    return raw.view(tdt).reshape(h.local_shape)


def shard_range(dim, rank, count):
    size = dim // count
    return rank * size, size


def narrow(t, split_dim, rank, count):
    """The contiguous shard rank/count of t along split_dim (uniform split only)."""
    shape = shape_of(t)
    if not (0 <= split_dim < len(shape)) or count <= 0 or not (0 <= rank < count):
        raise TensorError("invalid shard parameters (split_dim %d, rank %d of %d)" % (split_dim, rank, count))
    if shape[split_dim] % count:
        raise TensorError("only uniform sharding is supported (dim %d of size %d into %d)" % (
            split_dim, shape[split_dim], count))
    start, size = shard_range(shape[split_dim], rank, count)
    if _is_torch(t):
        return t.narrow(split_dim, start, size).contiguous()
    idx = [slice(None)] * len(shape)
    idx[split_dim] = slice(start, start + size)
    return np.ascontiguousarray(t[tuple(idx)])


def axis_tuple(kind, index, rank, count, split_dim, local_shape, expert_id=None, stage_id=None):
    code = AXIS_KINDS[kind.upper()]
    extent = local_shape[split_dim] if split_dim is not None and split_dim >= 0 else -1
    reserved0 = 0
    if code == 2 and expert_id is not None:
        reserved0 = int(expert_id)
    if code == 3 and stage_id is not None:
        reserved0 = int(stage_id)
    return (code, index, int(rank), int(count), -1 if split_dim is None else int(split_dim), reserved0,
            0 if extent < 0 else extent)


def shard_header(dtype, global_shape, local_shape, axes):
    """A SHARD header; axes are ParallelAxis-like objects."""
    tuples = []
    for i, ax in enumerate(axes):
        tuples.append(axis_tuple(ax.kind, i, ax.rank, ax.size, ax.split_dim, local_shape,
                                 getattr(ax, "expert_id", None), getattr(ax, "stage_id", None)))
    return Header(dtype, global_shape, local_shape, LAYOUT_SHARD, tuples)


def tp_key(key, rank):
    return "%s_tp_%d" % (key, rank)


def writer_key(key, rank, size, split_dim):
    return "%s__writer_%dof%d_sd%d" % (key, rank, size, split_dim)


def _axis_suffix(ax):
    s = "%s_%dof%d" % (ax.kind.lower(), ax.rank, ax.size)
    if ax.split_dim is not None:
        s += "_sd%d" % ax.split_dim
    if getattr(ax, "expert_id", None) is not None:
        s += "_eid%d" % ax.expert_id
    if getattr(ax, "stage_id", None) is not None:
        s += "_sid%d" % ax.stage_id
    return s


def parallelism_key(key, axes):
    """Mooncake's storage key of a shard described by axes."""
    if len(axes) == 1 and axes[0].kind.upper() == "TP":
        return tp_key(key, axes[0].rank)
    ordered = sorted(axes, key=lambda a: (_AXIS_ORDER.get(a.kind.upper(), 4), a.kind))
    return key + "".join("__" + _axis_suffix(a) for a in ordered)


def validate_axes(axes, what):
    if not axes or len(axes) > MAX_AXES:
        raise TensorError("%s: parallelism needs 1 to %d axes" % (what, MAX_AXES))
    seen = set()
    for ax in axes:
        k = str(getattr(ax, "kind", "")).upper()
        if k not in AXIS_KINDS:
            raise TensorError("%s: unsupported parallel axis kind %r" % (what, getattr(ax, "kind", None)))
        if k in seen:
            raise TensorError("%s: axis kind %s given twice" % (what, k))
        seen.add(k)
        if ax.size <= 0 or not (0 <= ax.rank < ax.size):
            raise TensorError("%s: axis %s rank %d of %d is invalid" % (what, k, ax.rank, ax.size))
        if k == "TP" and ax.split_dim is None:
            raise TensorError("%s: a TP axis needs split_dim" % what)
        if k != "TP" and ax.split_dim is not None:
            raise TensorError("%s: a %s axis must not give split_dim" % (what, k))
        if k == "EP" and getattr(ax, "expert_id", None) is None:
            raise TensorError("%s: an EP axis needs expert_id" % what)
        if k == "PP" and getattr(ax, "stage_id", None) is None:
            raise TensorError("%s: a PP axis needs stage_id" % what)


def cat(parts, dim):
    torch = _torch()
    if torch is not None and all(_is_torch(p) for p in parts):
        return torch.cat(parts, dim)
    return np.concatenate([p.numpy() if _is_torch(p) else p for p in parts], axis=dim)


# --- safetensors (the file format: u64 header length, JSON header, data) ---

_ST_DTYPES = {"float32": "F32", "float64": "F64", "int8": "I8", "uint8": "U8", "int16": "I16", "uint16": "U16",
              "int32": "I32", "uint32": "U32", "int64": "I64", "uint64": "U64", "bool": "BOOL", "float16": "F16",
              "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}
_ST_BACK = {v: k for k, v in _ST_DTYPES.items()}


def save_safetensors(tensors, path):
    """Writes {name: tensor} as a safetensors file."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        ins = inspect(t)
        data = ctypes.string_at(ins.ptr, ins.nbytes) if ins.nbytes else b""
        header[name] = {"dtype": _ST_DTYPES[_DTYPES[ins.header.dtype][0]], "shape": ins.header.global_shape,
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """{name: tensor} from a safetensors file, in file order."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, ent in header.items():
        if name == "__metadata__":
            continue
        code = _DTYPE_CODE[_ST_BACK[ent["dtype"]]]
        b, e = ent["data_offsets"]
        h = Header(code, ent["shape"])
        obj = bytearray(h.pack()) + raw[base + b:base + e]
        out[name] = decode(obj)
    return out
