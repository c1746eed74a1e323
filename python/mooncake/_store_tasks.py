"""MooncakeDistributedStore's replica clear and copy/move tasks (the master's
MasterTasks service).
"""

import ctypes
import json

from . import _native
from ._store_base import ErrorCode, _key, _keys
from ._store_types import UUID, QueryTaskResponse, TaskStatus, TaskType


class TasksMixin(object):
    """Replica clear and copy/move tasks."""

    def batch_replica_clear(self, keys, segment_name=""):
        """Clears the replicas of keys this client put: every copy with segment_name "" (the
        objects are removed), else only the copies on that segment (an object left without a
        copy is removed). Returns the keys cleared; keys that are missing, put by another
        client, unfinished or in use (a read lease, or written, read or checked within the
        master's lease TTL) are skipped. [] when not set up or on error."""
        if not self._ready("batch_replica_clear"):
            return []
        keys = [k.decode("utf-8") if isinstance(k, bytes) else str(k) for k in keys]
        if not keys:
            return []
        out = ctypes.c_void_p()
        n = self._lib.mc_store_replica_clear(self._h, len(keys), _keys(keys), _key(segment_name or ""),
                                                    ctypes.byref(out))
        if n < 0:
            self._rc("batch_replica_clear", n)
            return []
        raw = _native.take_bytes(out.value, n)
        return [str(k) for k in json.loads(raw)] if raw else []

    def create_copy_task(self, key, targets):
        """Asks the master for a replica of key on each target segment. Returns (task id, 0),
        or (UUID(0, 0), negative code): -704 no such key, -600 no target or one not mounted,
        -1010 a target being unmounted, -1401 too many pending tasks. The copy runs in the
        background on the client holding the source replica; follow it with query_task."""
        if not self._ready("create_copy_task"):
            return UUID(0, 0), ErrorCode.INVALID_PARAMS
        targets = [str(t) for t in targets]
        tid = (ctypes.c_uint64 * 2)()
        rc = self._lib.mc_store_create_copy_task(self._h, _key(key), len(targets), _keys(targets), tid)
        if rc < 0:
            return UUID(0, 0), self._rc("create_copy_task", rc)
        return UUID(tid[0], tid[1]), 0

    def create_move_task(self, key, source, target):
        """Asks the master to move key's replica on segment source to segment target. Returns
        (task id, 0), or (UUID(0, 0), negative code) as create_copy_task (-600 also when
        source == target or source holds no replica of key)."""
        if not self._ready("create_move_task"):
            return UUID(0, 0), ErrorCode.INVALID_PARAMS
        tid = (ctypes.c_uint64 * 2)()
        rc = self._lib.mc_store_create_move_task(self._h, _key(key), _key(source), _key(target), tid)
        if rc < 0:
            return UUID(0, 0), self._rc("create_move_task", rc)
        return UUID(tid[0], tid[1]), 0

    def query_task(self, task_id):
        """The state of a copy/move task: (QueryTaskResponse, 0), or (None, negative code):
        -1400 for an unknown task. The status goes PENDING -> PROCESSING -> SUCCESS or FAILED
        (the reason in message); assigned_client is the id of the client executing it."""
        try:
            hi, lo = task_id
            hi, lo = int(hi), int(lo)
        except (TypeError, ValueError):
            raise TypeError("query_task(): incompatible task_id %r (a (int, int) UUID is required)" % (task_id,))
        if not (0 <= hi < 1 << 64 and 0 <= lo < 1 << 64):
            raise TypeError("query_task(): task_id halves must be unsigned 64-bit ints")
        if not self._ready("query_task"):
            return None, ErrorCode.INVALID_PARAMS
        out = ctypes.c_void_p()
        n = self._lib.mc_store_query_task(self._h, hi, lo, ctypes.byref(out))
        if n < 0:
            return None, self._rc("query_task", n)
        t = json.loads(_native.take_bytes(out.value, n) or b"{}")
        return QueryTaskResponse(id=UUID(t.get("hi", hi), t.get("lo", lo)), type=TaskType(int(t.get("type", 0))),
                                 status=TaskStatus(int(t.get("status", 0))),
                                 created_at_ms_epoch=int(t.get("created_ms", 0)),
                                 last_updated_at_ms_epoch=int(t.get("updated_ms", 0)),
                                 assigned_client=t.get("client", ""), message=t.get("message", "")), 0
