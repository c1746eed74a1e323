"""mooncake.engine: a drop-in for Mooncake's ``TransferEngine`` Python class.

Backed by the Go transfer engine through libmooncake.so (see ``_native``).
Return conventions are Mooncake's: ``0`` on success and a negative number on
failure; async batch submissions return a batch id, ``0`` on failure;
``transfer_check_status`` returns ``1`` done, ``0`` running, ``-1`` failed,
``-2`` timed out. A failure never raises out of the native library: the
reason is logged (logger ``mooncake`` and the library's stderr log).

Addresses are plain ints (for a numpy array: ``arr.ctypes.data``). A session id
(``target_hostname``) is the peer's ``"host:rpc_port"``.
"""

import ctypes
import enum
import json
import logging
import threading

from . import _cuda, _native
from ._shared_segment import SharedSegment  # noqa: F401 (Mooncake's engine.SharedSegment)
from ._rpc import (CoroRPCInterface, ReceivedData, ReceivedTensor, RpcInterface, create_rpc_client,  # noqa: F401
                   create_rpc_server)

log = logging.getLogger("mooncake")

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "InnerTransferEngine", "Read", "Write",
           "SUPPORT_CUDA", "SUPPORT_HIP", "SUPPORT_EFA", "SUPPORT_MNNVL", "SUPPORT_MUSA", "SUPPORT_INTRA_NVLINK",
           "SUPPORT_CXL", "SharedSegment", "RpcInterface", "CoroRPCInterface", "ReceivedData", "ReceivedTensor",
           "create_rpc_client", "create_rpc_server"]

# Hardware transports this build has (Mooncake's module constants). CUDA:
# True when the library found a usable GPU (see _cuda): device memory is then
# registered and moved like host memory, staged through pinned host buffers
# over TCP and copied device to device on one host. The others: none; TCP
# and shared memory need no flag.
SUPPORT_CUDA = _cuda.supported()
SUPPORT_HIP = False
SUPPORT_EFA = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False
SUPPORT_CXL = False


class TransferOpcode(enum.IntEnum):
    """Mooncake's ``TransferOpcode`` (also ``TransferEngine.TransferOpcode``; ``READ``/``WRITE`` alias)."""

    Read = 0
    Write = 1
    READ = 0
    WRITE = 1


# Mooncake exports the opcode values at module level too.
Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify(object):
    """A notification: ``name`` and ``msg`` (Mooncake's ``TransferNotify``).

    Pass one as ``notify=`` to ``transfer_sync``/``batch_transfer_sync``: it is
    delivered to the peer after the transfer succeeded. ``get_notifies()`` returns
    these, with ``from_session`` (the sender) set; for this package's older
    callers a received one also unpacks as ``(from_session, name, msg)``.
    """

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg
        self.from_session = ""

    def __iter__(self):
        return iter((self.from_session, self.name, self.msg))

    def __eq__(self, other):
        if isinstance(other, TransferNotify):
            return (self.name, self.msg) == (other.name, other.msg)
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __repr__(self):
        return "TransferNotify(name=%r, msg=%r)" % (self.name, self.msg)


class InnerTransferEngine(object):
    """What ``get_engine()`` returns: a handle on the engine for sharing with a store."""

    def __init__(self, outer):
        self._outer = outer

    def handle(self):
        return self._outer._h


class _Ranges(object):
    """Address ranges this engine registered or allocated (guards the byte helpers)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ranges = {}  # addr -> length

    def add(self, addr, length):
        with self._lock:
            self._ranges[addr] = length

    def remove(self, addr):
        with self._lock:
            return self._ranges.pop(addr, None)

    def contains(self, addr, length):
        with self._lock:
            for base, n in self._ranges.items():
                if base <= addr and addr + length <= base + n:
                    return True
        return False

    def items(self):
        with self._lock:
            return sorted(self._ranges.items())


class TransferEngine(_native.Closable):
    """One transfer engine per process (Mooncake's model); create, then ``initialize``."""

    def __init__(self):
        self._lib = _native.lib()
        self._h = 0
        self._ranges = _Ranges()
        self._managed = {}
        self._name = ""

    # --- lifecycle -------------------------------------------------------

    def initialize(self, local_hostname, metadata_server="P2PHANDSHAKE", protocol="tcp", device_name=""):
        """Starts the engine. Returns 0, or -1 when it cannot start.

        ``local_hostname`` may carry a port (``"127.0.0.1:17000"``) to pin the RPC port.
        ``metadata_server``: ``P2PHANDSHAKE``, ``http://h:p/metadata`` (e.g. ``mooncake
        metadata-server``), ``etcd://h:p[,h:p...]`` or a bare ``h:p`` (etcd, as in Mooncake).
        With a metadata server the segment is published there and peers find it by
        its name, ``get_session_id()`` (``"host:rpc_port"``).
        """
        if self._h:
            log.error("mooncake: initialize: engine already initialized")
            return -1
        h = self._lib.mc_engine_open(_native.cstr(local_hostname), _native.cstr(metadata_server),
                                     _native.cstr(protocol), _native.cstr(device_name))
        if h <= 0:
            log.error("mooncake: initialize failed: %s", _native.last_error())
            return -1
        self._h = h
        buf = ctypes.create_string_buffer(512)
        n = self._lib.mc_engine_name(h, buf, len(buf))
        self._name = buf.value[:max(0, n)].decode() if n > 0 else ""
        return 0

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name, metadata_type=""):
        """Mooncake's extended initialize: a ``metadata_server`` without a scheme gets
        ``metadata_type + "://"`` in front (``"http"``, ``"etcd"``); otherwise as ``initialize``."""
        server = str(metadata_server or "")
        if metadata_type and "://" not in server and server.strip().upper() not in ("", "P2PHANDSHAKE"):
            server = "%s://%s" % (metadata_type, server)
        return self.initialize(local_hostname, server, protocol, device_name)

    def close(self):
        """Stops the engine and releases its memory registrations. Returns 0 or -1."""
        h, self._h = self._h, 0
        if not h:
            return 0
        self._managed.clear()
        rc = self._lib.mc_engine_close(h)
        if rc < 0:
            log.error("mooncake: close: %s", _native.last_error())
            return -1
        return 0

    def _ok(self, what):
        if not self._h:
            log.error("mooncake: %s: engine not initialized", what)
            return False
        return True

    def _fail(self, what):
        log.error("mooncake: %s: %s", what, _native.last_error())
        return -1

    def get_rpc_port(self):
        """The engine's RPC (handshake) port, or -1 before initialize."""
        if not self._ok("get_rpc_port"):
            return -1
        return int(self._lib.mc_engine_rpc_port(self._h))

    def get_session_id(self):
        """This engine's session id ``"host:rpc_port"`` (what peers pass as target_hostname)."""
        return self._name

    # --- memory ----------------------------------------------------------

    def register_memory(self, buffer_addr, capacity, location="*"):
        """Registers [buffer_addr, buffer_addr+capacity) for remote access. 0 or -1."""
        if not self._ok("register_memory"):
            return -1
        addr, n = int(buffer_addr), int(capacity)
        if self._lib.mc_engine_register(self._h, addr, n, _native.cstr(location)) < 0:
            return self._fail("register_memory")
        self._ranges.add(addr, n)
        return 0

    def unregister_memory(self, buffer_addr):
        """Unregisters a buffer registered at buffer_addr. 0 or -1."""
        if not self._ok("unregister_memory"):
            return -1
        addr = int(buffer_addr)
        if self._lib.mc_engine_unregister(self._h, addr) < 0:
            return self._fail("unregister_memory")
        self._ranges.remove(addr)
        return 0

    def batch_register_memory(self, buffer_addresses, capacities, location="*"):
        """Registers several buffers; 0 when all succeeded, else -1 (the others stay registered)."""
        if len(buffer_addresses) != len(capacities):
            log.error("mooncake: batch_register_memory: %d addresses but %d capacities",
                      len(buffer_addresses), len(capacities))
            return -1
        rc = 0
        for a, n in zip(buffer_addresses, capacities):
            if self.register_memory(a, n, location) != 0:
                rc = -1
        return rc

    def batch_unregister_memory(self, buffer_addresses):
        """Unregisters several buffers; 0 when all succeeded, else -1."""
        rc = 0
        for a in buffer_addresses:
            if self.unregister_memory(a) != 0:
                rc = -1
        return rc

    def allocate_managed_buffer(self, length):
        """Allocates an engine-managed, already registered buffer. Its address, or 0."""
        if not self._ok("allocate_managed_buffer"):
            return 0
        n = int(length)
        addr = self._lib.mc_engine_alloc_managed(self._h, n)
        if not addr:
            self._fail("allocate_managed_buffer")
            return 0
        self._managed[addr] = n
        self._ranges.add(addr, n)
        return int(addr)

    def free_managed_buffer(self, buffer_addr, length):
        """Frees a buffer from allocate_managed_buffer. 0 or -1."""
        if not self._ok("free_managed_buffer"):
            return -1
        addr = int(buffer_addr)
        if addr not in self._managed:
            log.error("mooncake: free_managed_buffer: 0x%x is not a managed buffer", addr)
            return -1
        if self._lib.mc_engine_free_managed(self._h, addr) < 0:
            return self._fail("free_managed_buffer")
        self._managed.pop(addr, None)
        self._ranges.remove(addr)
        return 0

    def get_first_buffer_address(self, segment_name):
        """Address of the first buffer a peer segment registered, or 0."""
        if not self._ok("get_first_buffer_address"):
            return 0
        addr = self._lib.mc_engine_first_buffer(self._h, _native.cstr(segment_name))
        if not addr:
            self._fail("get_first_buffer_address")
            return 0
        return int(addr)

    def write_bytes_to_buffer(self, dest_address, src_ptr, length):
        """Copies ``length`` bytes of ``src_ptr`` (bytes-like) into a registered buffer. 0 or -1."""
        dest, n = int(dest_address), int(length)
        data = bytes(src_ptr) if not isinstance(src_ptr, bytes) else src_ptr
        if n < 0 or n > len(data):
            log.error("mooncake: write_bytes_to_buffer: length %d out of range (have %d bytes)", n, len(data))
            return -1
        if not self._ranges.contains(dest, n):
            log.error("mooncake: write_bytes_to_buffer: [0x%x,+%d) is not inside a registered buffer", dest, n)
            return -1
        try:
            _cuda.from_host(dest, data[:n])  # a plain memmove for host memory
        except OSError as e:
            log.error("mooncake: write_bytes_to_buffer: %s", e)
            return -1
        return 0

    def read_bytes_from_buffer(self, source_address, length):
        """Returns ``length`` bytes read from a registered buffer (b"" when out of range)."""
        src, n = int(source_address), int(length)
        if n < 0 or not self._ranges.contains(src, n):
            log.error("mooncake: read_bytes_from_buffer: [0x%x,+%d) is not inside a registered buffer", src, n)
            return b""
        try:
            return _cuda.to_host(src, n)  # a plain read for host memory
        except OSError as e:
            log.error("mooncake: read_bytes_from_buffer: %s", e)
            return b""

    # --- transfers -------------------------------------------------------

    def _arrays(self, what, buffers, peer_addresses, lengths):
        n = len(buffers)
        if n == 0 or len(peer_addresses) != n or len(lengths) != n:
            log.error("mooncake: %s: need equal, non-empty lists (got %d, %d, %d)",
                      what, n, len(peer_addresses), len(lengths))
            return None
        return n, _native.u64_array(buffers), _native.u64_array(peer_addresses), _native.u64_array(lengths)

    def _sync(self, what, target, op, buffers, peer_addresses, lengths):
        if not self._ok(what):
            return -1
        a = self._arrays(what, buffers, peer_addresses, lengths)
        if a is None:
            return -1
        n, lo, re, ln = a
        if self._lib.mc_engine_transfer(self._h, _native.cstr(target), op, n, lo, re, ln) < 0:
            return self._fail(what)
        return 0

    def _async(self, what, target, op, buffers, peer_addresses, lengths):
        if not self._ok(what):
            return 0
        a = self._arrays(what, buffers, peer_addresses, lengths)
        if a is None:
            return 0
        n, lo, re, ln = a
        bid = self._lib.mc_engine_submit(self._h, _native.cstr(target), op, n, lo, re, ln)
        if bid <= 0:
            self._fail(what)
            return 0
        return int(bid)

    # transport_hint picks a transport in Mooncake (e.g. "rdma"); this engine has
    # one transport per peer, so the hint is accepted and not needed.

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length, transport_hint=""):
        """Writes local [buffer,+length) to the peer's address. 0 or -1."""
        return self._sync("transfer_sync_write", target_hostname, TransferOpcode.Write,
                          [buffer], [peer_buffer_address], [length])

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length, transport_hint=""):
        """Reads the peer's [peer_buffer_address,+length) into local buffer. 0 or -1."""
        return self._sync("transfer_sync_read", target_hostname, TransferOpcode.Read,
                          [buffer], [peer_buffer_address], [length])

    def _notify_after(self, what, rc, target_hostname, notify):
        if rc != 0 or notify is None:
            return rc
        if self.send_notify(target_hostname, notify.name, notify.msg) != 0:
            log.error("mooncake: %s: transfer done but the notify was not delivered", what)
            return -1
        return 0

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode, notify=None,
                      transport_hint=""):
        """Single transfer with an explicit TransferOpcode; notify (a TransferNotify) is sent after it. 0 or -1."""
        rc = self._sync("transfer_sync", target_hostname, int(opcode), [buffer], [peer_buffer_address], [length])
        return self._notify_after("transfer_sync", rc, target_hostname, notify)

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint=""):
        """Writes several local ranges to the peer and waits. 0 or -1."""
        return self._sync("batch_transfer_sync_write", target_hostname, TransferOpcode.Write,
                          buffers, peer_buffer_addresses, lengths)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses, lengths, transport_hint=""):
        """Reads several peer ranges into local buffers and waits. 0 or -1."""
        return self._sync("batch_transfer_sync_read", target_hostname, TransferOpcode.Read,
                          buffers, peer_buffer_addresses, lengths)

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode, notify=None,
                            transport_hint=""):
        """Batch transfer with an explicit TransferOpcode; notify is sent after it. 0 or -1."""
        rc = self._sync("batch_transfer_sync", target_hostname, int(opcode), buffers, peer_buffer_addresses, lengths)
        return self._notify_after("batch_transfer_sync", rc, target_hostname, notify)

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                   transport_hint=""):
        """Submits writes; returns a batch id for get_batch_transfer_status, 0 on failure."""
        return self._async("batch_transfer_async_write", target_hostname, TransferOpcode.Write,
                           buffers, peer_buffer_addresses, lengths)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                  transport_hint=""):
        """Submits reads; returns a batch id for get_batch_transfer_status, 0 on failure."""
        return self._async("batch_transfer_async_read", target_hostname, TransferOpcode.Read,
                           buffers, peer_buffer_addresses, lengths)

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode,
                             transport_hint=""):
        """Submits a batch with an explicit TransferOpcode; batch id or 0."""
        return self._async("batch_transfer_async", target_hostname, int(opcode), buffers, peer_buffer_addresses,
                           lengths)

    # CUDA transfers, ordered with a stream. Mooncake queues the transfer as a
    # host callback of the stream and returns; here the call waits for the
    # stream's earlier work (cuStreamSynchronize), moves the bytes and
    # returns when they are in place, so work queued on the stream after the
    # call sees them too (the same order, with the caller's thread held for
    # the transfer). Failures raise RuntimeError (Mooncake ends the process).

    def _no_cuda(self, what):
        log.error("mooncake: %s: CUDA is not available (SUPPORT_CUDA is False)", what)
        return -1

    def _on_cuda(self, what, target, op, buffers, peer_addresses, lengths, stream_ptr):
        if not SUPPORT_CUDA:
            return self._no_cuda(what)
        dev = max(0, _cuda.device_of(buffers[0]) if len(buffers) else 0)
        if _cuda.stream_sync(dev, stream_ptr) != 0:
            raise RuntimeError("%s: waiting for the stream failed: %s" % (what, _native.last_error()))
        if self._sync(what, target, op, buffers, peer_addresses, lengths) != 0:
            raise RuntimeError("%s: transfer failed: %s" % (what, _native.last_error()))
        return None

    def transfer_write_on_cuda(self, target_hostname, buffer, peer_buffer_address, length, stream_ptr=0,
                               transport_hint=""):
        return self._on_cuda("transfer_write_on_cuda", target_hostname, TransferOpcode.Write,
                             [buffer], [peer_buffer_address], [length], stream_ptr)

    def transfer_read_on_cuda(self, target_hostname, buffer, peer_buffer_address, length, stream_ptr=0,
                              transport_hint=""):
        return self._on_cuda("transfer_read_on_cuda", target_hostname, TransferOpcode.Read,
                             [buffer], [peer_buffer_address], [length], stream_ptr)

    def batch_transfer_write_on_cuda(self, target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr=0,
                                     transport_hint=""):
        return self._on_cuda("batch_transfer_write_on_cuda", target_hostname, TransferOpcode.Write,
                             list(buffers), list(peer_buffer_addresses), list(lengths), stream_ptr)

    def batch_transfer_read_on_cuda(self, target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr=0,
                                    transport_hint=""):
        return self._on_cuda("batch_transfer_read_on_cuda", target_hostname, TransferOpcode.Read,
                             list(buffers), list(peer_buffer_addresses), list(lengths), stream_ptr)

    def warmup_efa_segment(self, segment_name):
        """EFA is not supported by this build (SUPPORT_EFA is False): -1."""
        log.error("mooncake: warmup_efa_segment: EFA is not supported by this build")
        return -1

    def get_engine(self):
        """A handle on this engine (Mooncake's InnerTransferEngine), or None before initialize."""
        return InnerTransferEngine(self) if self._h else None

    def get_engine_ptr(self):
        """An opaque non-zero id of this engine (0 before initialize)."""
        return int(self._h)

    def get_batch_transfer_status(self, batch_ids):
        """Waits for the batches and frees them. 0 when all completed, else -1."""
        if not self._ok("get_batch_transfer_status"):
            return -1
        if isinstance(batch_ids, int):
            batch_ids = [batch_ids]
        ids = list(batch_ids)
        if not ids:
            return 0
        if any(int(i) <= 0 for i in ids):
            log.error("mooncake: get_batch_transfer_status: invalid batch id in %r", ids)
            return -1
        if self._lib.mc_batch_wait(self._h, len(ids), _native.i64_array(ids)) < 0:
            return self._fail("get_batch_transfer_status")
        return 0

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length, transport_hint=""):
        """Submits one write; returns a batch id for transfer_check_status, 0 on failure."""
        return self._async("transfer_submit_write", target_hostname, TransferOpcode.Write,
                           [buffer], [peer_buffer_address], [length])

    def transfer_check_status(self, batch_id):
        """1 done, 0 still running, -1 failed (or unknown id), -2 timed out.

        A batch is freed once it reports a final state (1, -1 or -2).
        """
        if not self._ok("transfer_check_status"):
            return -1
        rc = int(self._lib.mc_batch_check(self._h, int(batch_id)))
        if rc < 0:
            log.error("mooncake: transfer_check_status(%d): %s", batch_id, _native.last_error())
        return rc

    # --- control ---------------------------------------------------------

    def send_probe(self, peer_server_name):
        """Checks that a peer answers on its RPC port. 0 or -1."""
        if not self._ok("send_probe"):
            return -1
        if self._lib.mc_engine_probe(self._h, _native.cstr(peer_server_name)) < 0:
            return self._fail("send_probe")
        return 0

    def send_notify(self, target_hostname, name, msg):
        """Sends a small notification to a peer (see get_notifies). 0 or -1."""
        if not self._ok("send_notify"):
            return -1
        data = msg.encode("utf-8") if isinstance(msg, str) else bytes(msg)
        if self._lib.mc_engine_notify(self._h, _native.cstr(target_hostname), _native.cstr(name),
                                      data, len(data)) < 0:
            return self._fail("send_notify")
        return 0

    def get_notifies(self):
        """Drains received notifications: a list of TransferNotify (``name``, ``msg``, ``from_session``)."""
        if not self._ok("get_notifies"):
            return []
        out = ctypes.c_void_p()
        n = self._lib.mc_engine_notifies(self._h, ctypes.byref(out))
        if n < 0:
            self._fail("get_notifies")
            return []
        raw = _native.take_bytes(out.value, n)
        if not raw:
            return []
        out = []
        for x in json.loads(raw):
            n = TransferNotify(x.get("name", ""), x.get("msg", ""))
            n.from_session = x.get("from", "")
            out.append(n)
        return out

    def get_local_topology(self, device_name=None):
        """This engine's segment as JSON text (name, protocol, buffers)."""
        if not self._ok("get_local_topology"):
            return ""
        out = ctypes.c_void_p()
        n = self._lib.mc_engine_topology(self._h, ctypes.byref(out))
        if n < 0:
            self._fail("get_local_topology")
            return ""
        return _native.take_bytes(out.value, n).decode("utf-8", "replace")


TransferEngine.TransferOpcode = TransferOpcode
