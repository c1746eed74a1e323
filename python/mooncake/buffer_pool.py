"""mooncake.buffer_pool: Mooncake's public entry point for registered buffer pools.

``BufferPool`` (also named ``RegisteredBufferPool``) is defined in ``_buffer_pool``
and exported by ``mooncake.store`` as in Mooncake.
"""

from ._buffer_pool import BufferLease, BufferPool, RegisteredBufferPool

__all__ = ["BufferPool", "RegisteredBufferPool", "BufferLease"]
