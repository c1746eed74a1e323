"""The engine's RPC interface: Mooncake's ``RpcInterface`` (``mooncake.engine``).

A server process receives messages (``send_data``: bytes; ``send_tensor``: a tensor's bytes
with its shape and dtype) and hands each to a Python callback; a client sends them to
``"host:port"``. Mooncake runs this on coro_rpc; here the library's RPC message transport
(``mc_rpc_*``: a framed TCP protocol, reused connections) carries them, so both ends must be
this package. A send returns once the receiving process has queued the message; one thread per
server delivers queued messages to the callbacks in arrival order.

Callbacks (Mooncake's): ``set_data_receive_callback(fn)`` gets a dict ``{"source": str,
"data": bytes}`` (``source`` is the sender's ``"ip:port"``; Mooncake passes ``""``);
``set_tensor_receive_callback(fn)`` gets a :class:`ReceivedTensor`. An exception in a
callback is logged and the next message is delivered.
"""

import asyncio
import ctypes
import json
import logging
import struct
import threading

from . import _native

log = logging.getLogger("mooncake")

__all__ = ["RpcInterface", "CoroRPCInterface", "ReceivedData", "ReceivedTensor", "create_rpc_client",
           "create_rpc_server"]

_KIND_DATA = 1
_KIND_TENSOR = 2
_POLL_MS = 200
_MAX_TENSOR_HEADER = 1 << 16


_senders = None
_senders_lock = threading.Lock()


def _sender():
    """The threads that run the _async sends (shared by every interface of the process)."""
    global _senders
    with _senders_lock:
        if _senders is None:
            from concurrent.futures import ThreadPoolExecutor

            _senders = ThreadPoolExecutor(max_workers=16, thread_name_prefix="mooncake-rpc-send")
        return _senders


class ReceivedData(object):
    """A received message (Mooncake's ``ReceivedData``): ``source_address``, ``data_size``."""

    __slots__ = ("source_address", "data_size", "_data")

    def __init__(self, source_address="", data=b""):
        self.source_address = source_address
        self._data = bytes(data)
        self.data_size = len(self._data)

    def get_bytes(self):
        return self._data

    def get_memory_view(self):
        return memoryview(self._data)


class ReceivedTensor(object):
    """A received tensor (Mooncake's ``ReceivedTensor``): ``source_address``, ``shape`` (list of
    ints), ``dtype`` (``"float32"``, ``"int64"``, ...: torch's name without ``torch.``),
    ``total_bytes``; the bytes through ``get_data_as_bytes()`` / ``get_memory_view()``."""

    __slots__ = ("source_address", "shape", "dtype", "total_bytes", "_data")

    def __init__(self, source_address="", data=b"", shape=(), dtype=""):
        self.source_address = source_address
        self._data = bytes(data)
        self.shape = [int(d) for d in shape]
        self.dtype = dtype
        self.total_bytes = len(self._data)

    def get_data_size(self):
        return len(self._data)

    def get_data_as_bytes(self):
        return self._data

    def get_memory_view(self):
        return memoryview(self._data)

    def to_tensor(self):
        """The tensor itself (torch), shaped and typed as sent. Ours, beyond Mooncake."""
        import torch

        dtype = getattr(torch, self.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError("unknown dtype %r" % self.dtype)
        t = torch.frombuffer(bytearray(self._data), dtype=dtype) if self._data else torch.empty(0, dtype=dtype)
        return t.reshape(self.shape)


def _as_bytes(data):
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")  # pybind11's bytes cast accepts str as UTF-8
    return bytes(memoryview(data))


def _encode_tensor(tensor):
    """tensor -> header length u32 | JSON {shape, dtype} | the tensor's bytes."""
    for attr in ("data_ptr", "numel", "element_size", "shape", "dtype"):
        if not hasattr(tensor, attr):
            raise TypeError("not a tensor (no %s)" % attr)
    t = tensor
    if hasattr(t, "is_cuda") and t.is_cuda:
        t = t.cpu()
    if hasattr(t, "is_contiguous") and not t.is_contiguous():
        t = t.contiguous()
    n = int(t.numel()) * int(t.element_size())
    dtype = str(t.dtype)
    if dtype.startswith("torch."):
        dtype = dtype[len("torch."):]
    header = json.dumps({"shape": [int(d) for d in t.shape], "dtype": dtype}).encode()
    body = ctypes.string_at(int(t.data_ptr()), n) if n else b""
    return struct.pack("<I", len(header)) + header + body


def _decode_tensor(source, payload):
    if len(payload) < 4:
        raise ValueError("tensor message of %d bytes" % len(payload))
    (hlen,) = struct.unpack_from("<I", payload)
    if hlen > _MAX_TENSOR_HEADER or 4 + hlen > len(payload):
        raise ValueError("tensor header of %d bytes in a message of %d" % (hlen, len(payload)))
    meta = json.loads(payload[4:4 + hlen].decode("utf-8"))
    if not isinstance(meta, dict):
        raise ValueError("tensor header is not an object")
    shape, dtype = meta.get("shape"), meta.get("dtype")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape) \
            or not isinstance(dtype, str):
        raise ValueError("bad tensor header %r" % (meta,))
    return ReceivedTensor(source, payload[4 + hlen:], shape, dtype)


def _decode_message(raw):
    """The library's message layout: kind u8 | source length u16 | source | data."""
    if len(raw) < 3:
        raise ValueError("message of %d bytes" % len(raw))
    kind = raw[0]
    (slen,) = struct.unpack_from("<H", raw, 1)
    source = raw[3:3 + slen].decode("utf-8", "replace")
    return kind, source, raw[3 + slen:]


class RpcInterface(object):
    """Mooncake's ``RpcInterface``: ``initialize``/``initialize_server``/``initialize_client``,
    ``start_server``/``start_server_async``/``stop_server``, ``send_data``/``send_tensor``
    (``0``, or ``-1`` when not initialized or the send failed) and their ``_async`` forms
    (an ``asyncio.Future`` of the loop given, raising ``RuntimeError`` on failure)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._listen = ""
        self._timeout = 30
        self._pool = 100
        self._client = 0
        self._server = 0
        self._thread = None
        self._stopped = threading.Event()
        self._data_cb = None
        self._tensor_cb = None

    # setup ---------------------------------------------------------------
    def initialize(self, listen_address="", thread_count=0, timeout_seconds=30, pool_size=100):
        with self._lock:
            lib = _native.lib()
            if self._client:
                lib.mc_rpc_client_close(self._client)
            self._listen = listen_address or ""
            self._timeout = int(timeout_seconds) if int(timeout_seconds) > 0 else 30
            self._pool = max(1, int(pool_size))
            self._client = lib.mc_rpc_client_open(self._pool, self._timeout)
            if self._client <= 0:
                self._client = 0
                log.warning("RpcInterface.initialize failed: %s", _native.last_error())
                return False
            return True

    def initialize_client(self, pool_size=100, timeout_seconds=30):
        return self.initialize("", 0, timeout_seconds, pool_size)

    def initialize_server(self, listen_address, thread_count=8, timeout_seconds=30):
        return self.initialize(listen_address, thread_count, timeout_seconds, 100)

    # server --------------------------------------------------------------
    def start_server_async(self):
        """Listens on the address given to initialize and returns True; False when not
        initialized with a listen address, already started, or the address cannot be bound."""
        with self._lock:
            if not self._client or not self._listen or self._server:
                return False
            h = _native.lib().mc_rpc_server_open(_native.cstr(self._listen), self._timeout)
            if h <= 0:
                log.warning("RpcInterface.start_server: %s", _native.last_error())
                return False
            self._server = h
            self._stopped.clear()
            self._thread = threading.Thread(target=self._deliver, args=(h,), name="mooncake-rpc", daemon=True)
            self._thread.start()
            return True

    def start_server(self):
        """As Mooncake's: starts the server and blocks until ``stop_server()`` (from another
        thread or a callback); True when it ran."""
        if not self.start_server_async():
            return False
        self._stopped.wait()
        return True

    def start_server_impl(self, is_async=True):
        return self.start_server_async() if is_async else self.start_server()

    def get_server_port(self):
        """The port the server listens on (ours: useful with a ``:0`` listen address); -1 when not started."""
        with self._lock:
            if not self._server:
                return -1
            return int(_native.lib().mc_rpc_server_port(self._server))

    def stop_server(self):
        with self._lock:
            h, self._server = self._server, 0
            thread, self._thread = self._thread, None
        if h:
            _native.lib().mc_rpc_server_close(h)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._stopped.set()

    def set_data_receive_callback(self, callback):
        self._data_cb = callback

    def set_tensor_receive_callback(self, callback):
        self._tensor_cb = callback

    def _deliver(self, h):
        lib = _native.lib()
        out = ctypes.c_void_p()
        while True:
            n = lib.mc_rpc_recv(h, _POLL_MS, ctypes.byref(out))
            if n < 0:
                return  # closed
            if n == 0:
                continue
            raw = _native.take_bytes(out.value, n)
            try:
                kind, source, payload = _decode_message(raw)
                if kind == _KIND_TENSOR:
                    cb = self._tensor_cb
                    received = _decode_tensor(source, payload)
                    if cb is None:
                        log.warning("RpcInterface: a tensor from %s arrived with no tensor callback set", source)
                        continue
                    cb(received)
                else:
                    cb = self._data_cb
                    if cb is not None:
                        cb({"source": source, "data": payload})
            except Exception:
                log.exception("RpcInterface: receive callback failed")

    # client --------------------------------------------------------------
    def _send(self, target_address, kind, payload):
        with self._lock:
            client = self._client
        if not client:
            return -1
        buf = ctypes.c_char_p(payload) if payload else None
        rc = _native.lib().mc_rpc_send(client, _native.cstr(target_address), kind, buf, len(payload))
        if rc < 0:
            log.warning("RpcInterface send to %s failed (%d): %s", target_address, rc, _native.last_error())
            return -1
        return 0

    def send_data(self, target_address, data):
        try:
            payload = _as_bytes(data)
        except TypeError:
            log.warning("RpcInterface.send_data: data is not bytes-like")
            return -1
        return self._send(target_address, _KIND_DATA, payload)

    def send_tensor(self, target_address, tensor):
        try:
            payload = _encode_tensor(tensor)
        except Exception as exc:
            log.warning("RpcInterface.send_tensor: %s", exc)
            return -1
        return self._send(target_address, _KIND_TENSOR, payload)

    def _send_async(self, fn, target_address, value, loop, what):
        future = loop.create_future() if loop is not None else asyncio.Future()
        if not self._client:
            future.set_exception(RuntimeError("Communicator not initialized"))
            return future

        def run():
            try:
                rc = fn(target_address, value)
            except Exception as exc:  # never lose the future
                rc, err = -1, exc
            else:
                err = None

            def settle():
                if future.done():
                    return
                if rc >= 0:
                    future.set_result(rc)
                else:
                    future.set_exception(RuntimeError("%s failed%s" % (what, ": %s" % err if err else "")))

            loop.call_soon_threadsafe(settle)

        _sender().submit(run)
        return future

    def send_data_async(self, target_address, data, loop):
        return self._send_async(self.send_data, target_address, data, loop, "Send data")

    def send_tensor_async(self, target_address, tensor, loop):
        return self._send_async(self.send_tensor, target_address, tensor, loop, "Send tensor")

    def close(self):
        """Stops the server and closes the client's connections (ours; also on garbage collection)."""
        self.stop_server()
        with self._lock:
            h, self._client = self._client, 0
        if h:
            _native.lib().mc_rpc_client_close(h)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


CoroRPCInterface = RpcInterface  # Mooncake's alias


def create_rpc_client(local_rank=0, world_size=1):
    """An initialized client (Mooncake's factory: pool of 10, 30 s timeout)."""
    c = RpcInterface()
    c.initialize("", 0, 30, 10)
    return c


def create_rpc_server(local_rank=0, world_size=1):
    """An initialized server for ``0.0.0.0:8080`` (Mooncake's factory); call ``start_server_async()``."""
    s = RpcInterface()
    s.initialize("0.0.0.0:8080", 0, 30, 10)
    return s
