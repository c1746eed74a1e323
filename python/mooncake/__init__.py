"""Mooncake in Go: Python binding.

Drop-in modules for Mooncake's Python API, backed by the Go implementation
through a C ABI (libmooncake.so, loaded with ctypes):

* ``mooncake.engine.TransferEngine``: the transfer engine;
* ``mooncake.store.MooncakeDistributedStore``: the distributed KV store client;
* ``mooncake.connector.MooncakeRemoteConnector``: ``mooncake://`` arrays and strings;
* ``mooncake.mooncake_config``: Mooncake's ``MooncakeConfig`` (file / environment);
* ``mooncake.config``: the store's own config loader (same keys, lenient defaults);
* ``mooncake.BufferPool`` / ``RegisteredBufferPool``: registered buffer pools.

The library is found at ``$MOONCAKE_LIB`` or ``mooncake/_lib/libmooncake.so``
(built by ``make python``). Only the standard library is required; numpy is
used by the connector only.
"""

from pkgutil import extend_path

from .buffer_pool import BufferPool, RegisteredBufferPool

__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"

__all__ = ["BufferPool", "RegisteredBufferPool"]
