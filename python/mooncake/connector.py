"""A remote-connector helper over the store, like SGLang's ``mooncake://`` connector.

``MooncakeRemoteConnector("mooncake://127.0.0.1:50051")`` connects to the master
at that address (the other settings come from ``MOONCAKE_CONFIG_PATH`` / the
``MOONCAKE_*`` environment, see ``mooncake.config``) and offers:

* ``set(key, array)`` / ``get(key)``: numpy arrays, dtype and shape kept
  (torch CPU tensors are accepted by ``set`` and come back as numpy arrays);
* ``setstr(key, text)`` / ``getstr(key)``: strings;
* ``list(prefix)``: the keys under a prefix (SGLang's connector lacks it);
* ``remove(key)``, ``close()``.

Values are framed as ``b"MCNP" | u32 header length | JSON header | raw bytes``;
the header holds ``kind`` ("ndarray" or "str"), ``dtype`` and ``shape``.
"""

import json
import struct

from .store import MooncakeDistributedStore

__all__ = ["MooncakeRemoteConnector", "encode_array", "decode_array", "encode_str", "decode_str", "parse_url"]

_MAGIC = b"MCNP"
_HDR = struct.Struct("<4sI")
_MAX_HEADER = 1 << 20


def parse_url(url):
    """Returns the master address "host:port" of a ``mooncake://host:port[/...]`` URL."""
    if not isinstance(url, str) or not url.startswith("mooncake://"):
        raise ValueError("not a mooncake:// url: %r" % (url,))
    rest = url[len("mooncake://"):]
    hostport = rest.split("/", 1)[0]
    if not hostport:
        raise ValueError("mooncake url without host: %r" % (url,))
    if ":" not in hostport:
        hostport += ":50051"
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("bad host:port in mooncake url: %r" % (url,))
    return hostport


def _frame(header, payload):
    h = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([_HDR.pack(_MAGIC, len(h)), h, payload])


def _unframe(data):
    if len(data) < _HDR.size:
        raise ValueError("value too short for a mooncake frame")
    magic, hlen = _HDR.unpack_from(data)
    if magic != _MAGIC or hlen > _MAX_HEADER or _HDR.size + hlen > len(data):
        raise ValueError("not a mooncake connector value")
    header = json.loads(bytes(data[_HDR.size:_HDR.size + hlen]).decode())
    if not isinstance(header, dict):
        raise ValueError("bad mooncake connector header")
    return header, memoryview(data)[_HDR.size + hlen:]


def encode_array(array):
    """Frames a numpy array (or CPU torch tensor) with its dtype and shape."""
    import numpy as np
    if not isinstance(array, np.ndarray) and hasattr(array, "numpy"):
        t = array.detach() if hasattr(array, "detach") else array
        t = t.cpu() if hasattr(t, "cpu") else t
        array = t.numpy()
    a = np.asarray(array)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)  # (keeps ndim >= 1, so only for non-contiguous arrays)
    if a.dtype.hasobject:
        raise ValueError("cannot store arrays of Python objects")
    header = {"kind": "ndarray", "dtype": np.lib.format.dtype_to_descr(a.dtype), "shape": list(a.shape)}
    return _frame(header, a.tobytes())


def decode_array(data):
    """Inverse of encode_array: a numpy array with the stored dtype and shape."""
    import numpy as np
    header, payload = _unframe(data)
    if header.get("kind") != "ndarray":
        raise ValueError("value is not an array")
    descr = header["dtype"]
    if isinstance(descr, list):
        descr = [tuple(f) for f in descr]
    dtype = np.lib.format.descr_to_dtype(descr)
    shape = tuple(int(x) for x in header["shape"])
    count = 1
    for x in shape:
        count *= x
    if count * dtype.itemsize != len(payload):
        raise ValueError("array payload is %d bytes, header says %d" % (len(payload), count * dtype.itemsize))
    return np.frombuffer(payload, dtype=dtype).reshape(shape).copy()


def encode_str(text):
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return _frame({"kind": "str"}, str(text).encode("utf-8"))


def decode_str(data):
    header, payload = _unframe(data)
    if header.get("kind") != "str":
        raise ValueError("value is not a string")
    return bytes(payload).decode("utf-8")


class MooncakeRemoteConnector(object):
    """Key-value access to a Mooncake store for arrays and strings."""

    def __init__(self, url, store=None, **setup_kwargs):
        self.master = parse_url(url)
        self._own = store is None
        if store is None:
            store = MooncakeDistributedStore()
            setup_kwargs.setdefault("master_server_addr", self.master)
            rc = store.setup(**setup_kwargs)
            if rc != 0:
                raise ConnectionError("mooncake: cannot set up the store at %s (code %d)" % (self.master, rc))
        self.store = store

    def set(self, key, array):
        """Stores an array; 0 or a negative Mooncake code (a key that exists is kept)."""
        return self.store.put(key, encode_array(array))

    def _get_decoded(self, key, decode, errors):
        data = self.store.get(key)
        if not data:
            return None
        try:
            return decode(data)
        except errors:
            return None

    def get(self, key):
        """The array stored under key, or None when missing or not an array."""
        return self._get_decoded(key, decode_array, ValueError)

    def setstr(self, key, text):
        """Stores a string; 0 or a negative Mooncake code."""
        return self.store.put(key, encode_str(text))

    def getstr(self, key):
        """The string stored under key, or None when missing or not a string."""
        return self._get_decoded(key, decode_str, (ValueError, UnicodeDecodeError))

    def list(self, prefix=""):
        """The keys starting with prefix, sorted."""
        return self.store.list(prefix)

    def remove(self, key):
        return self.store.remove(key)

    def close(self):
        if self._own and self.store is not None:
            self.store.close()
        self.store = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
