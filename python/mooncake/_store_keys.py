"""MooncakeDistributedStore's key queries and removal: existence, sizes,
replica descriptors, remove (one, a batch, by regex, all) and list.
"""

import ctypes
import json
import urllib.parse

from . import _native
from ._store_base import ErrorCode, _key, _keys
from ._store_types import Descriptor, DiskDescriptor, MemoryDescriptor, ReplicaDescriptor, ReplicaStatus


class KeysMixin(object):
    """Queries and removal."""

    def is_exist(self, key):
        """1 when key exists, 0 when not, -1 on error."""
        if not self._ready("is_exist"):
            return -1
        rc = self._lib.mc_store_exist(self._h, _key(key))
        if rc < 0:
            self._rc("is_exist", rc)
            return -1
        return 1 if rc > 0 else 0

    def batch_is_exist(self, keys):
        """A list of 1/0/-1, in the order of keys."""
        if not self._ready("batch_is_exist"):
            return [-1] * len(keys)
        n = len(keys)
        if n == 0:
            return []
        out = (ctypes.c_int64 * n)()
        rc = self._lib.mc_store_batch_exist(self._h, n, _keys(keys), out)
        if rc < 0:
            self._rc("batch_is_exist", rc)
            return [-1] * n
        return [1 if x > 0 else (0 if x == 0 else -1) for x in out]

    def get_size(self, key):
        """The size of the value of key, or a negative code (-704 when missing)."""
        if not self._ready("get_size"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("get_size", self._lib.mc_store_get_size(self._h, _key(key)),
                        quiet=(ErrorCode.OBJECT_NOT_FOUND,))

    def get_replica_desc(self, key):
        """The replicas of key (a list of ReplicaDescriptor; empty when missing or on error): memory
        replicas, then copies on disk tiers (``is_local_disk_replica()``)."""
        if not self._ready("get_replica_desc"):
            return []
        out = ctypes.c_void_p()
        n = self._lib.mc_store_stat(self._h, _key(key), ctypes.byref(out))
        if n < 0:
            self._rc("get_replica_desc", n, quiet=(ErrorCode.OBJECT_NOT_FOUND,))
            return []
        info = json.loads(_native.take_bytes(out.value, n) or b"{}")
        reps = []
        for r in info.get("replicas") or []:
            d = Descriptor(size=int(r.get("size", 0)), buffer_address=int(r.get("addr", 0)),
                           transport_endpoint=r.get("endpoint") or r.get("segment", ""))
            reps.append(ReplicaDescriptor(ReplicaStatus.COMPLETE, memory=MemoryDescriptor(d)))
        for r in info.get("disk") or []:  # a copy on a disk tier: Mooncake's LOCAL_DISK replica
            k = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            dd = DiskDescriptor(file_path="%s/disk/object?key=%s&seq=%d" % (r.get("url", ""), urllib.parse.quote(k, safe=""),
                                                                            int(r.get("seq", 0))),
                                object_size=int(info.get("size", 0)))
            reps.append(ReplicaDescriptor(ReplicaStatus.COMPLETE, disk=dd, local_disk=True))
        return reps

    def batch_get_replica_desc(self, keys):
        """A dict key -> list of ReplicaDescriptor (keys that are missing are left out)."""
        out = {}
        for k in keys:
            reps = self.get_replica_desc(k)
            if reps:
                out[k] = reps
        return out

    def remove(self, key, force=False):
        """Removes key. 0, or negative (-704 missing, -706 leased and not forced)."""
        if not self._ready("remove"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("remove", self._lib.mc_store_remove(self._h, _key(key), 1 if force else 0),
                        quiet=(ErrorCode.OBJECT_NOT_FOUND,))

    def batch_remove(self, keys, force=False):
        """Removes several keys; one code per key (0 or negative)."""
        n = len(keys)
        if not self._ready("batch_remove"):
            return [ErrorCode.INTERNAL_ERROR] * n
        if n == 0:
            return []
        out = (ctypes.c_int64 * n)()
        rc = self._lib.mc_store_batch_remove(self._h, n, _keys(keys), 1 if force else 0, out)
        if rc < 0:
            self._rc("batch_remove", rc)
            return [int(rc)] * n
        return [int(x) for x in out]

    def remove_by_regex(self, regex_pattern, force=False):
        """Removes the keys matching a regular expression; the count removed or negative."""
        if not self._ready("remove_by_regex"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("remove_by_regex", self._lib.mc_store_remove_regex(self._h, _key(regex_pattern),
                                                                           1 if force else 0))

    def remove_all(self, force=False):
        """Removes every object; the count removed or negative."""
        if not self._ready("remove_all"):
            return ErrorCode.INTERNAL_ERROR
        return self._rc("remove_all", self._lib.mc_store_remove_all(self._h, 1 if force else 0))

    def list(self, prefix=""):
        """The keys that start with prefix, sorted (not in Mooncake's class; ours adds it)."""
        if not self._ready("list"):
            return []
        out = ctypes.c_void_p()
        n = self._lib.mc_store_list(self._h, _key(prefix), ctypes.byref(out))
        if n < 0:
            self._rc("list", n)
            return []
        raw = _native.take_bytes(out.value, n)
        return sorted(json.loads(raw)) if raw else []
