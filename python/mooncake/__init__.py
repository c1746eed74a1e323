"""Mooncake in Go: Python binding.

Drop-in modules for Mooncake's Python API, backed by the Go implementation
through a C ABI (libmooncake.so, loaded with ctypes):

* ``mooncake.engine.TransferEngine``: the transfer engine;
* ``mooncake.store.MooncakeDistributedStore``: the distributed KV store client;
* ``mooncake.connector.MooncakeRemoteConnector``: ``mooncake://`` arrays and strings;
* ``mooncake.config``: config file / environment handling.

The library is found at ``$MOONCAKE_LIB`` or ``mooncake/_lib/libmooncake.so``
(built by ``make python``). Only the standard library is required; numpy is
used by the connector only.
"""

__version__ = "0.1.0"
