"""mooncake.store: a drop-in for Mooncake's ``mooncake.store`` module.

``MooncakeDistributedStore`` is backed by the Go store client through
libmooncake.so (see ``_native``); the module-level types (``SoftPinAction``,
``ReplicateConfig``, ``ReplicaStatus``, ``TaskType``, ...) are in
``_store_types`` and re-exported here with Mooncake's names and values.
Return conventions are Mooncake's:

* ``put``/``put_from``/``put_batch``/``upsert*``/``remove``/``register_buffer``/...
  return ``0`` or a negative Mooncake error code (``-600`` invalid params,
  ``-704`` object not found, ``-706`` object has a lease, ``-800`` transfer
  failed, ``-900`` RPC failed, ``-1012`` not supported here, ...);
* ``get`` returns the value, ``b""`` when it is missing or on error;
* ``get_into`` returns the number of bytes read, or a negative code;
* ``is_exist`` returns ``1``, ``0`` or ``-1``; ``get_size`` a size or a negative code;
* ``remove_by_regex``/``remove_all`` return the number removed or a negative code;
* ``health_check`` returns ``0`` healthy, ``1`` not set up, ``2`` master unreachable.

A failure never raises out of the native library: the reason is logged
(logger ``mooncake`` and the library's stderr log). Methods whose feature
the Go store does not have (draining the disk tier, CUDA reads, ...) log why
and return Mooncake's failure value for their return type; docs/python.md
lists every entry of Mooncake's surface with its status.

``setup()`` takes Mooncake's positional and keyword arguments, or one config
dict / ``mooncake.mooncake_config.MooncakeConfig`` object; positional
arguments left out (or ``None``) come from ``MOONCAKE_CONFIG_PATH`` or the
``MOONCAKE_*`` environment (see ``mooncake.config``).
"""

import ctypes
import logging
import weakref

from . import _tensor
from ._store_base import (HC_HEALTHY, HC_MASTER_UNREACHABLE, HC_NOT_INITIALIZED,  # noqa: F401 (health_check values)
                          BufferHandle, ErrorCode, StoreBase)
from ._store_get import GetMixin
from ._store_keys import KeysMixin
from ._store_put import PutMixin
from ._store_segments import SegmentsMixin
from ._store_sessions import SessionsMixin
from ._store_setup import SetupMixin
from ._store_tasks import TasksMixin
from ._store_types import (UUID, Descriptor, DiskDescriptor, MemoryDescriptor, ObjectDataType, ParallelAxis,
                           QueryTaskResponse, ReadTarget, ReplicaDescriptor, ReplicaStatus, ReplicateConfig,
                           SoftPinAction, TaskStatus, TaskType, TensorParallelism)
from ._tensor_api import TensorAPI
from . import _numa

log = logging.getLogger("mooncake")

__all__ = [
    "MooncakeDistributedStore", "ReplicateConfig", "ErrorCode", "BufferHandle", "SoftPinAction", "ObjectDataType",
    "ReplicaStatus", "TaskType", "TaskStatus", "QueryTaskResponse", "MemoryDescriptor", "DiskDescriptor",
    "ReplicaDescriptor", "Descriptor", "ParallelAxis", "TensorParallelism", "ReadTarget", "UUID",
    "MooncakeHostMemAllocator", "MooncakeDistributedNoFRegister", "BufferPool", "BufferLease",
    "BufferLeaseView", "RegisteredBufferPool", "RegisteredBufferLease", "RegisteredBufferLeaseView",
    "bind_to_numa_node", "get_alloc_func_addr", "get_free_func_addr", "EngramStore", "EngramStoreConfig",
]

# Mooncake exports the values of these enums at module level too (export_values);
# TaskStatus comes last there, so PROCESSING and FAILED are TaskStatus values.
for _enum in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
    for _m in _enum:
        globals()[_m.name] = _m
del _enum, _m


class MooncakeDistributedStore(SetupMixin, PutMixin, GetMixin, KeysMixin, SegmentsMixin, SessionsMixin, TasksMixin,
                               TensorAPI, StoreBase):
    """Client of a Mooncake store cluster (a master plus storage nodes).

    One class, as in Mooncake, assembled from one module per concern: _store_setup
    (lifecycle), _store_put, _store_get, _store_keys (queries and removal),
    _store_segments, _store_sessions, _store_tasks, _tensor_api (tensors) over
    _store_base (the handle, errors, registered buffers).
    """

    def _get_pyclient_capsule(self):
        """A PyCapsule named ``mooncake.PyClient.shared_ptr`` for this client (what Mooncake's
        EngramStore and BufferPool take from a store wrapper); None before setup."""
        if not self._h:
            return None
        _live_stores[self._h] = self
        return _engram.make_capsule(self._h)


def _serialize_tensor(tensor):
    """Mooncake's tensor header of a CPU torch tensor (or numpy array) and its data:
    (header bytes, data address, data size, owner keeping the data alive)."""
    try:
        ins = _tensor.inspect(tensor)
    except _tensor.TensorError as e:
        raise RuntimeError("unsupported tensor for Mooncake tensor serialization: %s" % e)
    ins.header.data_bytes = ins.nbytes
    return (ins.header.pack(), ins.ptr, ins.nbytes, ins.owner)


def _tensor_metadata_size():
    """The size of Mooncake's tensor header (304)."""
    return _tensor.HEADER_SIZE


def _deserialize_tensor(payload):
    """The tensor in a header-plus-data payload; ValueError when it is not one."""
    try:
        return _tensor.decode(bytearray(payload))
    except _tensor.TensorError as e:
        raise ValueError("invalid serialized Mooncake tensor payload: %s" % e)


class MooncakeHostMemAllocator(object):
    """Page-aligned host memory (Mooncake's allocator for store buffers): ``alloc``/``free``."""

    def __init__(self):
        self._libc = ctypes.CDLL(None)
        self._libc.aligned_alloc.restype = ctypes.c_void_p
        self._libc.aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
        self._libc.free.argtypes = [ctypes.c_void_p]

    def alloc(self, size):
        """The address of size bytes (0 on failure)."""
        size = int(size)
        if size <= 0:
            return 0
        return int(self._libc.aligned_alloc(4096, (size + 4095) // 4096 * 4096) or 0)

    def free(self, ptr):
        """Frees memory from alloc. 0."""
        if ptr:
            self._libc.free(ctypes.c_void_p(int(ptr)))
        return 0


class MooncakeDistributedNoFRegister(object):
    """NVMe-over-Fabrics segment registration: not supported here (each call returns -1)."""

    def real_register(self, nqn="", nsid=1, traddr="", trsvcid=4420, base=0, size=1024,
                      master_server_addr="127.0.0.1:50051"):
        log.error("mooncake: real_register: NVMe-oF segments are not supported")
        return -1

    def real_unregister_by_endpoint(self, nqn="", nsid=1, traddr="", trsvcid=4420,
                                    master_server_addr="127.0.0.1:50051"):
        log.error("mooncake: real_unregister_by_endpoint: NVMe-oF segments are not supported")
        return -1


def bind_to_numa_node(node):
    """Binds the calling thread to the CPUs of NUMA node ``node`` and makes that node the
    preferred one for its future allocations (non-strict), as Mooncake's does with libnuma; here
    through ``sched_setaffinity`` and the ``set_mempolicy`` system call. Failures are warnings."""
    _numa.bind(int(node))


def get_alloc_func_addr():
    """The address of the C allocator used for store buffers (libc malloc here)."""
    return ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value or 0


def get_free_func_addr():
    """The address of the matching free function."""
    return ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p).value or 0


def _get_pyclient_from_wrapper(wrapper):
    """The client capsule of a MooncakeDistributedStore (None before its setup)."""
    return wrapper._get_pyclient_capsule()


# handle -> store, for the capsules handed out (weak: a capsule does not keep a store alive)
_live_stores = weakref.WeakValueDictionary()


def _store_from_capsule(capsule):
    h = _engram.capsule_handle(capsule)
    if h is None:
        return None
    st = _live_stores.get(h)
    return st if st is not None and st._h == h else None


from ._engram import EngramStore, EngramStoreConfig  # noqa: E402
from . import _engram  # noqa: E402


from ._buffer_pool import (BufferLease, BufferLeaseView, BufferPool, RegisteredBufferLease,  # noqa: E402
                           RegisteredBufferLeaseView, RegisteredBufferPool)  # (needs MooncakeDistributedStore's module)
