"""MooncakeDistributedStore's extra segments (mount_segment,
allocate_and_mount_segment, unmounting) and the SSD offload read counter.
"""

import ctypes
import json

from . import _native
from ._store_base import ErrorCode


class SegmentsMixin(object):
    """Extra segments and the disk tier counter."""

    def mount_segment(self, path, size, offset=0, protocol="tcp", location=""):
        """Maps size bytes of the file at path (from offset, a multiple of the page size) and
        contributes them as one more segment of this client. {"ret": 0, "segment_ids": [id]};
        {"ret": -1, "segment_ids": []} on failure (Mooncake's values)."""
        fail = {"ret": -1, "segment_ids": []}
        if not self._ready("mount_segment"):
            return fail
        out = ctypes.c_void_p()
        n = self._lib.mc_store_mount_segment(self._h, _native.cstr(str(path)), int(offset), int(size),
                                             ctypes.byref(out))
        if n < 0:
            self._rc("mount_segment", n)
            return fail
        return {"ret": 0, "segment_ids": json.loads(_native.take_bytes(out.value, n) or b"[]")}

    def allocate_and_mount_segment(self, size, protocol="tcp", location=""):
        """Allocates size bytes (rounded up to 4 MiB, Mooncake's slab) and contributes them as one
        more segment. {"ret": 0, "segment_ids": [id], "allocated_size": n}, or ret -1."""
        fail = {"ret": -1, "segment_ids": [], "allocated_size": 0}
        if not self._ready("allocate_and_mount_segment"):
            return fail
        out = ctypes.c_void_p()
        allocated = ctypes.c_uint64()
        n = self._lib.mc_store_allocate_segment(self._h, int(size), ctypes.byref(allocated), ctypes.byref(out))
        if n < 0:
            self._rc("allocate_and_mount_segment", n)
            return fail
        return {"ret": 0, "segment_ids": json.loads(_native.take_bytes(out.value, n) or b"[]"),
                "allocated_size": int(allocated.value)}

    def _unmount(self, what, segment_ids, grace_period_seconds):
        if not self._ready(what):
            return -1
        if isinstance(segment_ids, (str, bytes)):
            segment_ids = [segment_ids]
        ids = [s.decode() if isinstance(s, bytes) else str(s) for s in segment_ids]
        rc = self._lib.mc_store_unmount_segments(self._h, _native.cstr(json.dumps(ids)),
                                                 int(grace_period_seconds) * 1000)
        if rc < 0:
            self._rc(what, rc)
            return -1
        return 0

    def unmount_segment(self, segment_ids, grace_period_seconds=0):
        """Unmounts segments of mount_segment (waiting up to grace_period_seconds for readers)
        and unmaps them. 0, or -1 when an id is unknown (the others are still unmounted)."""
        return self._unmount("unmount_segment", segment_ids, grace_period_seconds)

    def unmount_and_free_segment(self, segment_ids, grace_period_seconds=0):
        """Unmounts segments of allocate_and_mount_segment and frees their memory. 0 or -1."""
        return self._unmount("unmount_and_free_segment", segment_ids, grace_period_seconds)

    def unmount_local_disk_segment(self, grace_period_seconds=0):
        return self._unsupported("unmount_local_disk_segment",
                                 "draining the disk tier is not supported (disk copies stay readable until "
                                 "the client closes)", ErrorCode.NOT_SUPPORTED)

    def get_offload_rpc_read_count(self):
        """How many values this client has read from disk tiers (Mooncake's offload RPC reads)."""
        if not self._h:
            return 0
        return max(0, int(self._lib.mc_store_disk_reads(self._h)))
