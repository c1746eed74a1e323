"""setup_dummy: dummy clients served by a `mooncake client` process (Mooncake's real client)."""

import ctypes
import logging
import os
import socket
import unittest

from _support import Child, mooncake_bin, start_master
from mooncake.store import ErrorCode, MooncakeDistributedStore

MIB = 1 << 20


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DummyClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.master, cls.addr = start_master()
        cls.real = "127.0.0.1:%d" % _free_port()
        cls.client = Child([mooncake_bin(), "client", "--master", cls.addr, "--host", "127.0.0.1", "--port",
                            cls.real.rsplit(":", 1)[1], "--segment-size", "64MiB", "--transport", "tcp"])
        cls.client.read_until(lambda line: "serving dummy clients" in line, timeout=30)
        cls.a = MooncakeDistributedStore()
        cls.b = MooncakeDistributedStore()
        for s in (cls.a, cls.b):
            if s.setup_dummy(16 * MIB, 4 * MIB, cls.real) != 0:
                raise RuntimeError("setup_dummy failed")

    @classmethod
    def tearDownClass(cls):
        cls.a.close()
        cls.b.close()
        cls.client.stop(signal_first=True)
        cls.master.stop(signal_first=True)
        logging.getLogger("mooncake").setLevel(logging.NOTSET)

    def test_put_get_between_dummies(self):
        self.assertEqual(self.a.put("d/k", b"from a"), 0)
        self.assertEqual(self.b.get("d/k"), b"from a")
        self.assertEqual(self.b.is_exist("d/k"), 1)
        self.assertEqual(self.b.get_size("d/k"), 6)
        self.assertEqual(self.b.batch_is_exist(["d/k", "d/none"]), [1, 0])
        self.assertEqual(self.a.get("d/none"), b"")
        self.assertEqual(self.a.get_into("d/none", ctypes.addressof(ctypes.create_string_buffer(8)), 8),
                         ErrorCode.OBJECT_NOT_FOUND)
        self.assertIn("d/k", self.b.list("d/"))
        self.assertTrue(self.a.get_hostname())

    def test_pool_buffers_move_in_place(self):
        size = 2 * MIB
        src = self.a.alloc_from_mem_pool(size)
        dst = self.b.alloc_from_mem_pool(size)
        self.assertNotEqual(src, 0)
        self.assertNotEqual(dst, 0)
        self.assertEqual(self.a.register_buffer(src, size), 0)
        self.assertEqual(self.b.register_buffer(dst, size), 0)
        payload = os.urandom(size)
        ctypes.memmove(src, payload, size)
        self.assertEqual(self.a.batch_put_from(["d/p0", "d/p1"], [src, src + MIB], [MIB, MIB]), [0, 0])
        self.assertEqual(self.b.batch_get_into(["d/p1", "d/p0"], [dst, dst + MIB], [MIB, MIB]), [MIB, MIB])
        self.assertEqual(ctypes.string_at(dst, MIB), payload[MIB:])
        self.assertEqual(ctypes.string_at(dst + MIB, MIB), payload[:MIB])
        self.assertEqual(self.a.unregister_buffer(src), 0)
        self.assertEqual(self.b.unregister_buffer(dst), 0)
        self.assertEqual(self.a.alloc_from_mem_pool(1 << 40), 0)

    def test_remove_and_tensors(self):
        import numpy as np
        self.assertEqual(self.a.put_tensor("d/t", np.arange(6, dtype=np.int64).reshape(2, 3)), 0)
        self.assertEqual(np.asarray(self.b.get_tensor("d/t")).tolist(), [[0, 1, 2], [3, 4, 5]])
        self.assertEqual(self.a.put("d/r", b"x"), 0)
        self.assertEqual(self.b.remove("d/r"), 0)
        self.assertEqual(self.b.remove("d/r"), ErrorCode.OBJECT_NOT_FOUND)
        self.assertEqual(self.a.batch_remove(["d/none"]), [ErrorCode.OBJECT_NOT_FOUND])

    def test_setup_dummy_errors(self):
        s = MooncakeDistributedStore()
        self.assertLess(s.setup_dummy(MIB, MIB, "127.0.0.1:1"), 0)  # nobody serves it
        self.assertEqual(s.alloc_from_mem_pool(64), 0)  # not set up
        self.assertEqual(self.a.setup_dummy(MIB, MIB, self.real), ErrorCode.INVALID_PARAMS)  # already set up


if __name__ == "__main__":
    unittest.main()
