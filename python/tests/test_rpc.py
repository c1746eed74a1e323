"""mooncake.engine's RpcInterface: messages and tensors between two interfaces over real sockets."""

import asyncio
import logging
import queue
import struct
import unittest

from mooncake import _rpc, engine

try:
    import torch
except ImportError:  # torch is optional
    torch = None


class RpcTest(unittest.TestCase):
    def setUp(self):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        self.got = queue.Queue()
        self.server = engine.RpcInterface()
        self.assertTrue(self.server.initialize_server("127.0.0.1:0", thread_count=2))
        self.server.set_data_receive_callback(self.got.put)
        self.server.set_tensor_receive_callback(self.got.put)
        self.assertTrue(self.server.start_server_async())
        self.assertFalse(self.server.start_server_async())  # already started
        self.addr = "127.0.0.1:%d" % self.server.get_server_port()
        self.client = engine.create_rpc_client()
        self.addCleanup(self.server.close)
        self.addCleanup(self.client.close)

    def test_data_in_order_with_source(self):
        payloads = [b"hello", b"", b"x" * (3 << 20), bytearray(b"ba"), memoryview(b"mv")]
        for p in payloads:
            self.assertEqual(self.client.send_data(self.addr, p), 0)
        for p in payloads:
            m = self.got.get(timeout=10)
            self.assertEqual(m["data"], bytes(p))
            self.assertTrue(m["source"].startswith("127.0.0.1:"))

    def test_callback_exception_does_not_stop_delivery(self):
        calls = []

        def bad(m):
            calls.append(m)
            if len(calls) == 1:
                raise ValueError("boom")
            self.got.put(m)

        self.server.set_data_receive_callback(bad)
        self.assertEqual(self.client.send_data(self.addr, b"1"), 0)
        self.assertEqual(self.client.send_data(self.addr, b"2"), 0)
        self.assertEqual(self.got.get(timeout=10)["data"], b"2")

    @unittest.skipIf(torch is None, "torch missing")
    def test_tensor(self):
        t = torch.arange(24, dtype=torch.int64).reshape(2, 3, 4)[:, 1:, :]  # not contiguous
        self.assertEqual(self.client.send_tensor(self.addr, t), 0)
        r = self.got.get(timeout=10)
        self.assertIsInstance(r, engine.ReceivedTensor)
        self.assertEqual((r.shape, r.dtype, r.total_bytes), ([2, 2, 4], "int64", 2 * 2 * 4 * 8))
        self.assertTrue(torch.equal(r.to_tensor(), t))
        self.assertEqual(bytes(r.get_memory_view()), r.get_data_as_bytes())
        self.assertEqual(self.client.send_tensor(self.addr, object()), -1)

    def test_async_and_failures(self):
        async def go():
            loop = asyncio.get_running_loop()
            self.assertEqual(await self.client.send_data_async(self.addr, b"async", loop), 0)
            dead = engine.RpcInterface()
            self.assertTrue(dead.initialize_server("127.0.0.1:0"))
            self.assertTrue(dead.start_server_async())
            dead_addr = "127.0.0.1:%d" % dead.get_server_port()
            dead.close()
            with self.assertRaises(RuntimeError):
                await self.client.send_data_async(dead_addr, b"x", loop)
            with self.assertRaisesRegex(RuntimeError, "not initialized"):
                await engine.RpcInterface().send_data_async(self.addr, b"x", loop)

        asyncio.run(go())
        self.assertEqual(self.got.get(timeout=10)["data"], b"async")
        self.assertEqual(engine.RpcInterface().send_data(self.addr, b"x"), -1)  # not initialized
        self.assertFalse(engine.RpcInterface().start_server_async())
        self.server.stop_server()
        self.assertEqual(self.client.send_data(self.addr, b"x"), -1)

    def test_bad_tensor_headers_are_refused(self):
        for payload in (b"", b"\xff\xff\xff\xff", struct.pack("<I", 4) + b"[1]x", struct.pack("<I", 2) + b"{}",
                        struct.pack("<I", 27) + b'{"shape":[-1],"dtype":"x"}'):
            with self.assertRaises(ValueError):
                _rpc._decode_tensor("s", payload)

    def test_alias_and_factories(self):
        self.assertIs(engine.CoroRPCInterface, engine.RpcInterface)
        d = engine.ReceivedData("a:1", b"abc")
        self.assertEqual((d.source_address, d.data_size, d.get_bytes()), ("a:1", 3, b"abc"))


if __name__ == "__main__":
    unittest.main()
