"""BufferPool: reusable host buffers registered with a store (Mooncake's ``mooncake.store.BufferPool``).

A pool hands out leases on buffers in power-of-two size classes
(``min_size_class`` up to ``max_size_class``; a larger request gets a buffer of
its own size). Each buffer is allocated once, aligned to ``min(alignment, 4096)``
bytes, registered with the store (``register_buffer``) and reused after its
lease is released, so ``put_from``/``get_into`` on a lease's ``ptr`` need no
per-call registration.

Limits: ``max_bytes`` (0 = none) and ``max_regions`` (buffers allocated, None =
none). When a limit is reached, idle buffers of other classes are freed first;
then ``acquire`` waits (``block_on_exhaustion``, up to ``timeout``) for a
release, or raises ``RuntimeError("... exhausted ...")``.

A lease is released by ``release()``, by leaving its ``with`` block or when it
is garbage collected. ``release()`` refuses (``RuntimeError``) while a
memoryview from ``lease.buffer`` is still alive, and ``close()`` refuses while
leases are out.
"""

import ctypes
import threading
import time
import weakref

__all__ = ["BufferPool", "BufferLease", "BufferLeaseView", "RegisteredBufferPool", "RegisteredBufferLease",
           "RegisteredBufferLeaseView"]

_MAX_SIZE = 1 << 48  # no single buffer beyond 256 TiB


class _Region(object):
    """One allocated, registered buffer: `cap` bytes at `addr` (aligned inside `mem`)."""

    __slots__ = ("mem", "addr", "cap", "cls")

    def __init__(self, cap, align, cls):
        self.mem = (ctypes.c_char * (cap + align))()
        base = ctypes.addressof(self.mem)
        self.addr = (base + align - 1) // align * align
        self.cap = cap
        self.cls = cls


def _view_alive(view):
    """Whether an exported view still exposes the buffer (not collected, not ``release()``d)."""
    if view is None:
        return False
    try:
        len(view)
    except ValueError:  # a released memoryview
        return False
    return True


class BufferLease(object):
    """One buffer lent by a BufferPool: ``ptr``, ``size``, ``buffer`` (a writable memoryview of size bytes)."""

    def __init__(self, pool, region, size):
        self._pool = pool
        self._region = region
        self._size = size
        self._views = []
        self._released = False

    @property
    def ptr(self):
        return self._region.addr

    @property
    def size(self):
        return self._size

    @property
    def buffer(self):
        if self._released:
            raise RuntimeError("BufferLease: the lease was released")
        arr = (ctypes.c_char * max(self._size, 1)).from_address(self._region.addr)
        arr._keep = self._region  # the memory lives as long as any view of it
        view = memoryview(arr).cast("B")[:self._size]
        self._views = [r for r in self._views if r() is not None]
        self._views.append(weakref.ref(view))
        return view

    def release(self):
        """Gives the buffer back to the pool (a second call does nothing)."""
        if self._released:
            return
        if any(_view_alive(r()) for r in self._views):
            raise RuntimeError("BufferLease: cannot release while exported views of its buffer are alive")
        self._released = True
        self._pool._give_back(self._region)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def __del__(self):
        try:
            if not self._released:
                self._released = True
                self._pool._give_back(self._region)
        except Exception:
            pass


class BufferPool(object):
    """A pool of buffers registered with ``store`` (any object with register_buffer/unregister_buffer)."""

    def __init__(self, store, max_bytes=0, min_size_class=64 * 1024, max_size_class=None, alignment=8 * 1024 * 1024,
                 block_on_exhaustion=True, default_timeout=None, max_regions=None, prewarm_size=None,
                 prewarm_count=0):
        alignment = int(alignment)
        if alignment <= 0 or alignment & (alignment - 1):
            raise RuntimeError("BufferPool: alignment must be a power of two, got %d" % alignment)
        if int(min_size_class) <= 0:
            raise RuntimeError("BufferPool: min_size_class must be positive")
        self._store = store
        self._max_bytes = int(max_bytes or 0)
        self._min = int(min_size_class)
        self._max_cls = int(max_size_class) if max_size_class else None
        self._align = min(alignment, 4096)
        self._block = bool(block_on_exhaustion)
        self._timeout = default_timeout
        self._max_regions = max_regions
        self._cv = threading.Condition()
        self._free = {}  # class size -> [_Region]
        self._regions = []
        self._bytes = 0
        self._out = 0  # leases not released
        self._closed = False
        if prewarm_count:
            self.prewarm(prewarm_size or self._min, prewarm_count)

    def _class(self, size):
        if size < 0 or size > _MAX_SIZE:
            raise RuntimeError("BufferPool: size %d overflows the pool's capacity" % size)
        c = self._min
        while c < size:
            c <<= 1
        if self._max_cls and c > self._max_cls:
            return max(size, 1)  # beyond the largest class: a buffer of its own size
        return c

    def _new(self, c):
        if self._max_regions is not None and len(self._regions) >= self._max_regions:
            return None
        if self._max_bytes and self._bytes + c > self._max_bytes and self._bytes > 0:
            return None
        r = _Region(c, self._align, c)
        rc = self._store.register_buffer(r.addr, c)
        if rc != 0:
            raise RuntimeError("BufferPool: register_buffer failed with %d" % rc)
        self._regions.append(r)
        self._bytes += c
        return r

    def _drop_free(self, keep):
        """Frees the idle buffers of classes other than keep; reports whether any was freed."""
        dropped = False
        for c, free in list(self._free.items()):
            if c == keep:
                continue
            while free:
                r = free.pop()
                self._store.unregister_buffer(r.addr)
                self._regions.remove(r)
                self._bytes -= r.cap
                dropped = True
        return dropped

    def acquire(self, size, block=None, timeout=None):
        """A BufferLease of size bytes."""
        size = int(size)
        c = self._class(size)
        block = self._block if block is None else bool(block)
        timeout = self._timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        with self._cv:
            while True:
                if self._closed:
                    raise RuntimeError("BufferPool is closed")
                free = self._free.get(c)
                r = free.pop() if free else self._new(c)
                if r is None and self._drop_free(c):
                    r = self._new(c)
                if r is not None:
                    self._out += 1
                    return BufferLease(self, r, size)
                if not block:
                    raise RuntimeError("BufferPool exhausted (%d bytes in %d buffers)" % (
                        self._bytes, len(self._regions)))
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise RuntimeError("BufferPool exhausted: no buffer of %d bytes within %.3fs" % (size, timeout))
                self._cv.wait(left)

    def buffer(self, size, block=None, timeout=None):
        """Same as acquire (a lease usable as a context manager)."""
        return self.acquire(size, block, timeout)

    def prewarm(self, size, count):
        """Allocates and registers count buffers of size's class ahead of use."""
        c = self._class(int(size))
        with self._cv:
            for _ in range(int(count)):
                r = self._new(c)
                if r is None:
                    break
                self._free.setdefault(c, []).append(r)

    def _give_back(self, r):
        with self._cv:
            self._out -= 1
            if not self._closed:
                self._free.setdefault(r.cls, []).append(r)
            self._cv.notify_all()

    def close(self):
        """Unregisters every buffer. RuntimeError while leases are out."""
        with self._cv:
            if self._closed:
                return
            if self._out > 0:
                raise RuntimeError("BufferPool: cannot close with %d active leases" % self._out)
            self._closed = True
            for r in self._regions:
                try:
                    self._store.unregister_buffer(r.addr)
                except Exception:
                    pass
            self._regions = []
            self._free.clear()
            self._cv.notify_all()


class BufferLeaseView(object):
    """A view of a lease's memory (Mooncake's type of the same name): ``buffer`` is a writable
    memoryview of it. ``BufferLease.buffer`` returns the memoryview itself."""

    def __init__(self, lease):
        self._lease = lease

    @property
    def buffer(self):
        return self._lease.buffer


RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView
