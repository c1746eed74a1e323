"""Runs vLLM's example Mooncake proxy script (path in argv[1], unchanged)
with the remaining arguments, on Debian's FastAPI 0.92, which predates
FastAPI(lifespan=...): the lifespan context is then run from startup and
shutdown events instead. Our own harness; it copies nothing of vLLM's."""

import contextlib
import inspect
import runpy
import sys

import fastapi

if "lifespan" not in inspect.signature(fastapi.FastAPI.__init__).parameters:
    _init = fastapi.FastAPI.__init__

    def _patched(self, *args, lifespan=None, **kw):
        _init(self, *args, **kw)
        if lifespan is None:
            return
        stack = contextlib.AsyncExitStack()

        async def _start():
            await stack.enter_async_context(lifespan(self))

        async def _stop():
            await stack.aclose()

        self.router.on_startup.append(_start)
        self.router.on_shutdown.append(_stop)

    fastapi.FastAPI.__init__ = _patched

script = sys.argv[1]
sys.argv = [script] + sys.argv[2:]
runpy.run_path(script, run_name="__main__")
