"""Process-shared host memory: Mooncake's ``mooncake.engine.SharedSegment``.

One rank of a group (``owner_rank``) allocates ``size`` bytes of shared memory (a memfd) and
maps it; the others map the same pages. Two phases, as in Mooncake: ``SharedSegment.create``
returns ``(segment, blob)`` on every rank; the blobs (bytes, one per rank, in rank order) are
exchanged by the caller (``mooncake.shared_segment`` all-gathers them over a torch process
group) and handed to ``segment.complete(blobs)``, which checks that every rank declared the
same name and size and maps the owner's pages. Peers open the owner's memfd through
``/proc/<pid>/fd/<fd>``, so they must run on the same host as the owner, as the same user,
while the owner is alive; the pages are freed when the last process unmaps them.

Only host memory (``mmap=True``, ``host_register=False``) is supported: ``supported()`` says
so, and ``create`` raises ``RuntimeError`` for the device paths (VMM, HostRegister), as a
Mooncake build without them does. ``device_addr()`` is 0 (no device mapping).
"""

import ctypes
import json
import mmap as _mmap
import os
import threading

__all__ = ["SharedSegment"]

_BLOB_VERSION = 1


class SharedSegment(object):
    def __init__(self, name, size, world_size, rank_id, owner_rank):
        self._name, self._size = name, size
        self._world, self._rank, self._owner = world_size, rank_id, owner_rank
        self._fd = -1
        self._map = None
        self._base = 0
        self._ready = False
        self._lock = threading.Lock()

    @staticmethod
    def supported(mmap=True, host_register=False):
        return bool(mmap) and not host_register and hasattr(os, "memfd_create")

    @staticmethod
    def create(name, size, world_size, rank_id, owner_rank=0, device_id=0, mmap=True, host_register=False):
        """Phase one: ``(segment, blob)``; the owner's pages exist and are mapped."""
        if not SharedSegment.supported(mmap, host_register):
            raise RuntimeError("SharedSegment: only host memory (mmap=True, host_register=False) can be shared here")
        size, world_size, rank_id, owner_rank = int(size), int(world_size), int(rank_id), int(owner_rank)
        if size <= 0:
            raise RuntimeError("SharedSegment: size must be positive")
        if world_size <= 0 or not 0 <= rank_id < world_size or not 0 <= owner_rank < world_size:
            raise RuntimeError("SharedSegment: rank %d / owner %d out of a world of %d" % (rank_id, owner_rank,
                                                                                          world_size))
        seg = SharedSegment(str(name), size, world_size, rank_id, owner_rank)
        blob = {"v": _BLOB_VERSION, "name": seg._name, "size": size, "world": world_size, "rank": rank_id,
                "owner": owner_rank}
        if rank_id == owner_rank:
            fd = os.memfd_create("mooncake-shared-segment", getattr(os, "MFD_CLOEXEC", 1))
            try:
                os.ftruncate(fd, size)
                seg._map_fd(fd)
            except Exception:
                os.close(fd)
                raise
            seg._fd = fd
            blob.update(pid=os.getpid(), fd=fd)
        return seg, json.dumps(blob, sort_keys=True).encode()

    def _map_fd(self, fd):
        m = _mmap.mmap(fd, self._size, _mmap.MAP_SHARED, _mmap.PROT_READ | _mmap.PROT_WRITE)
        self._map = m
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(m))

    def complete(self, blobs):
        """Phase two: blobs of every rank, indexed by rank."""
        with self._lock:
            if self._ready:
                raise RuntimeError("SharedSegment: complete() called twice")
            if len(blobs) != self._world:
                raise RuntimeError("SharedSegment: %d blobs for a world of %d" % (len(blobs), self._world))
            decoded = []
            for i, b in enumerate(blobs):
                try:
                    d = json.loads(bytes(b).decode())
                except (ValueError, UnicodeDecodeError, TypeError):
                    raise RuntimeError("SharedSegment: blob of rank %d is not a segment blob" % i)
                if not isinstance(d, dict) or d.get("v") != _BLOB_VERSION:
                    raise RuntimeError("SharedSegment: blob of rank %d is not a segment blob" % i)
                decoded.append(d)
            for i, d in enumerate(decoded):
                mine = (self._name, self._size, self._world, self._owner)
                theirs = (d.get("name"), d.get("size"), d.get("world"), d.get("owner"))
                if theirs != mine or d.get("rank") != i:
                    raise RuntimeError("SharedSegment: rank %d declared %r, rank %d %r: the ranks disagree"
                                       % (i, theirs, self._rank, mine))
            if self._rank != self._owner:
                owner = decoded[self._owner]
                path = "/proc/%d/fd/%d" % (int(owner["pid"]), int(owner["fd"]))
                try:
                    fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
                except OSError as exc:
                    raise RuntimeError("SharedSegment: cannot open the owner's memory %s (same host and user, "
                                       "owner alive?): %s" % (path, exc))
                try:
                    if os.fstat(fd).st_size != self._size:
                        raise RuntimeError("SharedSegment: the owner's memory is not %d bytes" % self._size)
                    self._map_fd(fd)
                finally:
                    os.close(fd)
            self._ready = True

    def ready(self):
        return self._ready

    def base_addr(self):
        return self._base if self._ready or self._rank == self._owner else 0

    def device_addr(self):
        return 0

    def size(self):
        return self._size

    def __del__(self):
        try:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        except Exception:
            pass
