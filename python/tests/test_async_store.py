"""mooncake.async_store: awaitable async_<method> calls against a real master."""

import asyncio
import logging
import unittest

from _support import start_master
from mooncake.async_store import MooncakeDistributedStoreAsync


class AsyncStoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.master, cls.addr = start_master()
        cls.s = MooncakeDistributedStoreAsync()
        rc = cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 8 << 20, "tcp", "", cls.addr)
        if rc != 0:
            raise RuntimeError("setup: %d" % rc)

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.master.stop(signal_first=True)
        logging.getLogger("mooncake").setLevel(logging.NOTSET)

    def test_async_calls(self):
        s = self.s

        async def run():
            keys = ["async/%d" % i for i in range(16)]
            rcs = await asyncio.gather(*(s.async_put(k, k.encode() * 3) for k in keys))
            self.assertEqual(rcs, [0] * len(keys))
            got = await asyncio.gather(*(s.async_get(k) for k in keys))
            self.assertEqual(got, [k.encode() * 3 for k in keys])
            self.assertEqual(await s.async_is_exist("async/none"), 0)
            self.assertEqual(await s.async_upsert("async/0", b"new"), 0)  # right after a read: no lease check
            self.assertEqual(await s.async_get("async/0"), b"new")
            self.assertEqual(await s.async_remove("async/1", True), 0)  # read just now: leased, so forced
            self.assertEqual(await s.async_is_exist("async/1"), 0)

        asyncio.run(run())
        # the coroutine function is kept on the instance
        self.assertIs(s.async_get, s.async_get)

    def test_unknown_names(self):
        with self.assertRaises(AttributeError):
            self.s.async_no_such_method
        with self.assertRaises(AttributeError):
            self.s.not_async
        with self.assertRaises(AttributeError):
            self.s.async_
