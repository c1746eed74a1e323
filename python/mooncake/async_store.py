"""mooncake.async_store: MooncakeDistributedStore with an awaitable ``async_<name>``
for every method ``<name>`` (Mooncake's MooncakeDistributedStoreAsync).

``await store.async_get(key)`` runs ``store.get(key)`` in the running loop's
default executor (a thread), so the event loop keeps serving while the call
waits on the network; the store's calls are thread-safe. The coroutine
function is made on first use and kept on the instance.
"""

import asyncio
import functools

from .store import MooncakeDistributedStore

__all__ = ["MooncakeDistributedStoreAsync"]

_PREFIX = "async_"


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    """A MooncakeDistributedStore whose methods are also awaitable as async_<name>."""

    def __getattr__(self, name):
        # only called for names not found the usual way
        if not name.startswith(_PREFIX) or len(name) == len(_PREFIX):
            raise AttributeError("%r object has no attribute %r" % (type(self).__name__, name))
        sync_name = name[len(_PREFIX):]
        try:
            method = getattr(self, sync_name)
        except AttributeError:
            raise AttributeError("%r object has no attribute %r (nor %r)" % (type(self).__name__, name, sync_name))
        if not callable(method):
            raise AttributeError("%r is not callable" % sync_name)

        @functools.wraps(method)
        async def call(*args, **kwargs):
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, functools.partial(method, *args, **kwargs))

        setattr(self, name, call)
        return call
