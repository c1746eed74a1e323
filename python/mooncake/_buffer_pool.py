"""BufferPool: reusable host buffers registered with a store (Mooncake's ``mooncake.store.BufferPool``).

A pool hands out leases on buffers in power-of-two size classes
(``min_size_class`` up to ``max_size_class``). Each buffer is allocated once,
registered with the store (``register_buffer``) and reused after a lease is
released, so ``put_from``/``get_into`` on a lease's ``ptr`` need no per-call
registration. ``acquire`` blocks (up to ``timeout``) when ``max_bytes`` is
reached and ``block_on_exhaustion`` is set, else raises ``MemoryError``.
"""

import ctypes
import threading
import time

__all__ = ["BufferPool", "BufferLease", "RegisteredBufferPool"]


class BufferLease(object):
    """One buffer lent by a BufferPool: ``ptr``, ``size``, ``buffer`` (a writable memoryview)."""

    def __init__(self, pool, cls_size, mem, size):
        self._pool = pool
        self._cls = cls_size
        self._mem = mem
        self._size = size
        self._released = False

    @property
    def ptr(self):
        return ctypes.addressof(self._mem)

    @property
    def size(self):
        return self._size

    @property
    def buffer(self):
        return memoryview(self._mem).cast("B")[:self._size]

    def release(self):
        """Gives the buffer back to the pool (a second call does nothing)."""
        if not self._released:
            self._released = True
            self._pool._give_back(self._cls, self._mem)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class BufferPool(object):
    """A pool of buffers registered with ``store`` (any object with register_buffer/unregister_buffer)."""

    def __init__(self, store, max_bytes=0, min_size_class=64 * 1024, max_size_class=None, alignment=8 * 1024 * 1024,
                 block_on_exhaustion=True, default_timeout=None, max_regions=None, prewarm_size=None,
                 prewarm_count=0):
        if min_size_class <= 0:
            raise ValueError("min_size_class must be positive")
        self._store = store
        self._max_bytes = int(max_bytes or 0)
        self._min = int(min_size_class)
        self._max_cls = int(max_size_class) if max_size_class else None
        self._block = bool(block_on_exhaustion)
        self._timeout = default_timeout
        self._max_regions = max_regions
        self._cv = threading.Condition()
        self._free = {}  # class size -> [ctypes buffer]
        self._all = []  # every buffer allocated (to unregister on close)
        self._bytes = 0
        self._closed = False
        if prewarm_count:
            self.prewarm(prewarm_size or self._min, prewarm_count)

    def _class(self, size):
        c = self._min
        while c < size:
            c <<= 1
        if self._max_cls and c > self._max_cls:
            raise ValueError("size %d exceeds max_size_class %d" % (size, self._max_cls))
        return c

    def _new(self, c):
        if self._max_regions is not None and len(self._all) >= self._max_regions:
            return None
        if self._max_bytes and self._bytes + c > self._max_bytes:
            return None
        mem = (ctypes.c_char * c)()
        rc = self._store.register_buffer(ctypes.addressof(mem), c)
        if rc != 0:
            raise MemoryError("BufferPool: register_buffer failed with %d" % rc)
        self._all.append(mem)
        self._bytes += c
        return mem

    def acquire(self, size, block=None, timeout=None):
        """A BufferLease of at least size bytes."""
        size = int(size)
        if size <= 0:
            raise ValueError("size must be positive")
        c = self._class(size)
        block = self._block if block is None else bool(block)
        timeout = self._timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        with self._cv:
            while True:
                if self._closed:
                    raise RuntimeError("BufferPool is closed")
                free = self._free.get(c)
                if free:
                    return BufferLease(self, c, free.pop(), size)
                mem = self._new(c)
                if mem is None and self._drop_free(c):
                    mem = self._new(c)
                if mem is not None:
                    return BufferLease(self, c, mem, size)
                if not block:
                    raise MemoryError("BufferPool exhausted (%d bytes in use)" % self._bytes)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("BufferPool: no buffer of %d bytes within the timeout" % size)
                self._cv.wait(left)

    def _drop_free(self, keep):
        """Frees the idle buffers of classes other than keep; reports whether any was freed."""
        dropped = False
        for c, free in list(self._free.items()):
            if c == keep:
                continue
            while free:
                mem = free.pop()
                self._store.unregister_buffer(ctypes.addressof(mem))
                self._all.remove(mem)
                self._bytes -= c
                dropped = True
        return dropped

    def buffer(self, size, block=None, timeout=None):
        """Same as acquire (a lease usable as a context manager)."""
        return self.acquire(size, block, timeout)

    def prewarm(self, size, count):
        """Allocates and registers count buffers of size's class ahead of use."""
        c = self._class(int(size))
        with self._cv:
            for _ in range(int(count)):
                mem = self._new(c)
                if mem is None:
                    break
                self._free.setdefault(c, []).append(mem)

    def _give_back(self, c, mem):
        with self._cv:
            if self._closed:
                return
            self._free.setdefault(c, []).append(mem)
            self._cv.notify_all()

    def close(self):
        """Unregisters every buffer; leases still out become invalid."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            for mem in self._all:
                try:
                    self._store.unregister_buffer(ctypes.addressof(mem))
                except Exception:
                    pass
            self._free.clear()
            self._cv.notify_all()


RegisteredBufferPool = BufferPool
