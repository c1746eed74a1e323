"""MooncakeDistributedStore against a real master and storage node (processes of bin/mooncake)."""

import ctypes
import hashlib
import logging
import os
import unittest

import numpy as np

from _support import start_master, start_storage_node, wait_for
from mooncake.connector import MooncakeRemoteConnector
from mooncake.store import ErrorCode, MooncakeDistributedStore, ReplicateConfig

MIB = 1 << 20


def rand_bytes(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


class Cluster(object):
    """A master and one storage node, stopped in reverse order."""

    def __init__(self, segment_size="256MiB"):
        self.master, self.addr = start_master()
        try:
            self.node = start_storage_node(self.addr, segment_size)
        except Exception:
            self.master.stop()
            raise

    def client(self, **kw):
        s = MooncakeDistributedStore()
        args = dict(local_hostname="127.0.0.1", metadata_server="P2PHANDSHAKE", global_segment_size=0,
                    local_buffer_size=160 * MIB, protocol="tcp", rdma_devices="", master_server_addr=self.addr)
        args.update(kw)
        rc = s.setup(**args)
        if rc != 0:
            raise RuntimeError("store setup failed: %d" % rc)
        return s

    def stop(self):
        """Stops the node, then the master (SIGTERM: a clean shutdown); returns their exit codes."""
        return [self.node.stop(signal_first=True), self.master.stop(signal_first=True)]


class StoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.cluster = Cluster()
        try:
            cls.store = cls.cluster.client()
        except Exception:
            cls.cluster.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.store.close()
        assert cls.cluster.stop() == [0, 0], "master or storage node did not exit cleanly"

    def test_put_get_exist_size(self):
        v = rand_bytes(10000, 1)
        self.assertEqual(self.store.put("pg/a", v), 0)
        self.assertEqual(self.store.get("pg/a"), v)
        self.assertEqual(self.store.is_exist("pg/a"), 1)
        self.assertEqual(self.store.get_size("pg/a"), 10000)
        # A put of an existing key succeeds and keeps the first value (Mooncake semantics).
        self.assertEqual(self.store.put("pg/a", b"other"), 0)
        self.assertEqual(self.store.get("pg/a"), v)
        # bytearray, memoryview and numpy values are accepted.
        self.assertEqual(self.store.put("pg/ba", bytearray(b"xyz")), 0)
        self.assertEqual(self.store.put("pg/np", np.arange(10, dtype=np.int16)), 0)
        self.assertEqual(self.store.get("pg/ba"), b"xyz")
        self.assertEqual(self.store.get("pg/np"), np.arange(10, dtype=np.int16).tobytes())
        h = self.store.get_buffer("pg/a")
        self.assertEqual(h.size(), len(v))
        self.assertEqual(ctypes.string_at(h.ptr(), h.size()), v)
        self.assertIsNone(self.store.get_buffer("pg/missing"))

    def test_missing(self):
        self.assertEqual(self.store.get("missing/x"), b"")
        self.assertEqual(self.store.is_exist("missing/x"), 0)
        self.assertEqual(self.store.get_size("missing/x"), ErrorCode.OBJECT_NOT_FOUND)
        self.assertEqual(self.store.remove("missing/x"), ErrorCode.OBJECT_NOT_FOUND)
        buf = np.zeros(16, dtype=np.uint8)
        self.assertEqual(self.store.get_into("missing/x", buf.ctypes.data, 16), ErrorCode.OBJECT_NOT_FOUND)

    def test_bad_input(self):
        self.assertLess(self.store.put("", b"abc"), 0)
        self.assertLess(self.store.put("bad/empty", b""), 0)
        self.assertEqual(self.store.put_batch(["a"], []), ErrorCode.INVALID_PARAMS)
        self.assertLess(self.store.put_from("bad/null", 0, 10), 0)
        self.assertLess(self.store.get_into("pg/a", 0, 10), 0)
        self.assertLess(self.store.unregister_buffer(12345), 0)
        self.assertEqual(self.store.health_check(), 0)  # still serving

    def test_get_into_and_put_from(self):
        v = rand_bytes(300000, 2)
        self.assertEqual(self.store.put("gi/a", v), 0)
        # Unregistered numpy memory works through a copy.
        dst = np.zeros(400000, dtype=np.uint8)
        self.assertEqual(self.store.get_into("gi/a", dst.ctypes.data, dst.nbytes), len(v))
        self.assertEqual(dst[:len(v)].tobytes(), v)
        # Too small a buffer is an error code, and nothing is read past it.
        small = np.zeros(1000, dtype=np.uint8)
        self.assertEqual(self.store.get_into("gi/a", small.ctypes.data, small.nbytes), ErrorCode.INVALID_PARAMS)
        # Registered memory: put_from and get_into without staging.
        reg = np.zeros(2 * MIB, dtype=np.uint8)
        self.assertEqual(self.store.register_buffer(reg.ctypes.data, reg.nbytes), 0)
        try:
            reg[:MIB] = np.frombuffer(rand_bytes(MIB, 3), dtype=np.uint8)
            self.assertEqual(self.store.put_from("gi/reg", reg.ctypes.data, MIB), 0)
            self.assertEqual(self.store.get_into("gi/reg", reg.ctypes.data + MIB, MIB), MIB)
            np.testing.assert_array_equal(reg[MIB:], reg[:MIB])
            self.assertEqual(self.store.get("gi/reg"), reg[:MIB].tobytes())
        finally:
            self.assertEqual(self.store.unregister_buffer(reg.ctypes.data), 0)
        self.assertLess(self.store.unregister_buffer(reg.ctypes.data), 0)
        # put_from of unregistered memory also works (staged).
        self.assertEqual(self.store.put_from("gi/unreg", dst.ctypes.data, 5000), 0)
        self.assertEqual(self.store.get("gi/unreg"), dst[:5000].tobytes())

    def test_batches(self):
        keys = ["b/%03d" % i for i in range(40)]
        vals = [rand_bytes(100 + 37 * i, 100 + i) for i in range(40)]
        self.assertEqual(self.store.put_batch(keys, vals), 0)
        self.assertEqual(self.store.get_batch(keys), vals)
        self.assertEqual(self.store.batch_is_exist(["b/000", "b/nope", "b/039"]), [1, 0, 1])
        bufs = [np.zeros(len(v) + 10, dtype=np.uint8) for v in vals]
        got = self.store.batch_get_into(keys + ["b/nope"], [b.ctypes.data for b in bufs] + [bufs[0].ctypes.data],
                                        [b.nbytes for b in bufs] + [bufs[0].nbytes])
        self.assertEqual(got, [len(v) for v in vals] + [ErrorCode.OBJECT_NOT_FOUND])
        for b, v in zip(bufs, vals):
            self.assertEqual(b[:len(v)].tobytes(), v)
        srcs = [np.frombuffer(rand_bytes(2000, 200 + i), dtype=np.uint8).copy() for i in range(5)]
        rcs = self.store.batch_put_from(["bf/%d" % i for i in range(5)], [s.ctypes.data for s in srcs], [2000] * 5)
        self.assertEqual(rcs, [0] * 5)
        for i, s in enumerate(srcs):
            self.assertEqual(self.store.get("bf/%d" % i), s.tobytes())

    def test_multi_buffers(self):
        parts = [np.frombuffer(rand_bytes(n, 300 + n), dtype=np.uint8).copy() for n in (100, 4096, 7)]
        rcs = self.store.batch_put_from_multi_buffers(["mb/a", "mb/bad"], [[p.ctypes.data for p in parts], [0]],
                                                      [[p.nbytes for p in parts], [5]])
        self.assertEqual(rcs, [0, ErrorCode.INVALID_PARAMS])
        whole = b"".join(p.tobytes() for p in parts)
        self.assertEqual(self.store.get("mb/a"), whole)
        dsts = [np.zeros(n, dtype=np.uint8) for n in (2000, 2203, 10)]
        tiny = np.zeros(8, dtype=np.uint8)
        got = self.store.batch_get_into_multi_buffers(
            ["mb/a", "mb/a", "mb/missing"], [[d.ctypes.data for d in dsts], [tiny.ctypes.data], [tiny.ctypes.data]],
            [[d.nbytes for d in dsts], [8], [8]])
        self.assertEqual(got, [len(whole), ErrorCode.INVALID_PARAMS, ErrorCode.OBJECT_NOT_FOUND])
        self.assertEqual(b"".join(d.tobytes() for d in dsts)[:len(whole)], whole)

    def test_large_value(self):
        n = 64 * MIB
        v = rand_bytes(n, 4)
        self.assertEqual(self.store.put("large/64m", v), 0)
        self.assertEqual(self.store.get_size("large/64m"), n)
        got = self.store.get("large/64m")
        self.assertEqual(len(got), n)
        self.assertEqual(hashlib.sha256(got).digest(), hashlib.sha256(v).digest())
        dst = np.zeros(n, dtype=np.uint8)
        self.assertEqual(self.store.register_buffer(dst.ctypes.data, n), 0)
        try:
            self.assertEqual(self.store.get_into("large/64m", dst.ctypes.data, n), n)
        finally:
            self.store.unregister_buffer(dst.ctypes.data)
        self.assertEqual(hashlib.sha256(dst.tobytes()).digest(), hashlib.sha256(v).digest())
        self.assertEqual(self.store.remove("large/64m", force=True), 0)

    def test_many_small(self):
        n = 500
        keys = ["small/%04d" % i for i in range(n)]
        vals = [rand_bytes(1 + (i * 7919) % 4096, 1000 + i) for i in range(n)]
        for k, v in zip(keys[:100], vals[:100]):
            self.assertEqual(self.store.put(k, v), 0)
        self.assertEqual(self.store.put_batch(keys[100:], vals[100:]), 0)
        self.assertEqual(self.store.get_batch(keys), vals)
        self.assertEqual(self.store.list("small/"), keys)

    def test_remove_and_regex(self):
        for i in range(5):
            self.assertEqual(self.store.put("rx/a%d" % i, b"v%d" % i), 0)
        self.assertEqual(self.store.put("rx/b0", b"b"), 0)
        self.assertEqual(self.store.remove("rx/a0"), 0)
        self.assertEqual(self.store.is_exist("rx/a0"), 0)
        self.assertEqual(self.store.remove_by_regex("^rx/a"), 4)
        self.assertEqual(self.store.list("rx/"), ["rx/b0"])
        # A get takes a lease: remove fails with OBJECT_HAS_LEASE unless forced.
        self.assertEqual(self.store.get("rx/b0"), b"b")
        with self.assertLogs("mooncake", level="ERROR") as cm:
            self.assertEqual(self.store.remove("rx/b0"), ErrorCode.OBJECT_HAS_LEASE)
        # The reason names the operation once ("remove: store: remove ..."),
        # never "remove: remove:".
        self.assertTrue(any("mooncake: remove: " in line for line in cm.output), cm.output)
        self.assertFalse(any("remove: remove:" in line for line in cm.output), cm.output)
        self.assertEqual(self.store.remove("rx/b0", force=True), 0)
        self.assertEqual(self.store.remove_by_regex("(bad"), ErrorCode.INVALID_PARAMS)

    def test_replicate_config(self):
        cfg = ReplicateConfig(replica_num=1, with_soft_pin=True)
        self.assertEqual(self.store.put("rc/a", b"pinned", cfg), 0)
        self.assertEqual(self.store.get("rc/a"), b"pinned")
        with self.assertRaises(TypeError):
            self.store.put("rc/b", b"x", config={"replica_num": 1})

    def test_connector(self):
        conn = MooncakeRemoteConnector("mooncake://" + self.cluster.addr, store=self.store)
        a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
        self.assertEqual(conn.set("conn/t1", a), 0)
        b = conn.get("conn/t1")
        self.assertEqual(b.dtype, a.dtype)
        self.assertEqual(b.shape, a.shape)
        np.testing.assert_array_equal(a, b)
        self.assertEqual(conn.setstr("conn/s1", "héllo"), 0)
        self.assertEqual(conn.getstr("conn/s1"), "héllo")
        self.assertIsNone(conn.get("conn/missing"))
        self.assertIsNone(conn.getstr("conn/missing"))
        self.assertIsNone(conn.get("conn/s1"))  # a string is not an array
        self.assertEqual(conn.list("conn/"), ["conn/s1", "conn/t1"])
        conn.close()  # does not close a store it did not open
        self.assertEqual(self.store.health_check(), 0)

    def test_value_larger_than_staging(self):
        # Values larger than a 1 MiB staging buffer: sent from where they are (the store client
        # registers large values itself), and from memory registered with register_buffer.
        small = self.cluster.client(local_buffer_size=MIB)
        try:
            v = np.frombuffer(rand_bytes(2 * MIB, 7), dtype=np.uint8).copy()
            self.assertEqual(small.put("stage/bytes", v.tobytes()), 0)
            self.assertEqual(self.store.get("stage/bytes"), v.tobytes())
            self.assertEqual(small.register_buffer(v.ctypes.data, v.nbytes), 0)
            self.assertEqual(small.put_from("stage/big", v.ctypes.data, v.nbytes), 0)
            self.assertEqual(small.get_into("stage/big", v.ctypes.data, v.nbytes), v.nbytes)
            self.assertEqual(small.unregister_buffer(v.ctypes.data), 0)
            self.assertEqual(self.store.get("stage/big"), v.tobytes())
        finally:
            self.assertEqual(small.close(), 0)

    def test_second_client_sees_data(self):
        other = self.cluster.client()
        try:
            self.assertEqual(other.put("two/x", b"from other"), 0)
            self.assertEqual(self.store.get("two/x"), b"from other")
        finally:
            self.assertEqual(other.close(), 0)

    def test_metadata_server_setting_is_ignored(self):
        # Mooncake configurations often name an HTTP or etcd metadata server; the
        # store finds segments by P2P handshake, so one that is not even running
        # changes nothing.
        for meta in ("http://127.0.0.1:1/metadata", "127.0.0.1:1", "redis://127.0.0.1:1"):
            other = self.cluster.client(metadata_server=meta, global_segment_size=16 * MIB)
            try:
                v = rand_bytes(200 * 1024, len(meta))
                key = "meta/" + meta.split(":")[0]
                self.assertEqual(other.put(key, v), 0)
                self.assertEqual(other.get(key), v)
                self.assertEqual(self.store.get(key), v)
            finally:
                self.assertEqual(other.close(), 0)


class StoreLifecycleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)

    def test_not_set_up(self):
        s = MooncakeDistributedStore()
        self.assertEqual(s.get("x"), b"")
        self.assertLess(s.put("x", b"y"), 0)
        self.assertEqual(s.is_exist("x"), -1)
        self.assertEqual(s.batch_is_exist(["x", "y"]), [-1, -1])
        self.assertEqual(s.list(), [])
        self.assertEqual(s.close(), 0)

    def test_bad_setup(self):
        s = MooncakeDistributedStore()
        self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", "lots", 16 * MIB, "tcp", "", "127.0.0.1:1"),
                         ErrorCode.INVALID_PARAMS)
        self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "pigeon", "", "127.0.0.1:1"),
                         ErrorCode.INVALID_PARAMS)

    def test_env_setup_remove_all_and_master_loss(self):
        cluster = Cluster(segment_size="64MiB")
        env = {"MOONCAKE_MASTER": cluster.addr, "MOONCAKE_GLOBAL_SEGMENT_SIZE": "16mb",
               "MOONCAKE_LOCAL_BUFFER_SIZE": "8mb", "MOONCAKE_PROTOCOL": "tcp"}
        old = {k: os.environ.get(k) for k in list(env) + ["MOONCAKE_CONFIG_PATH"]}
        os.environ.update(env)
        os.environ.pop("MOONCAKE_CONFIG_PATH", None)
        s = MooncakeDistributedStore()
        pure = None
        try:
            self.assertEqual(s.setup(), 0)  # everything from the environment
            self.assertEqual(s.config.global_segment_size, 16 * MIB)
            self.assertEqual(s.config.local_buffer_size, 8 * MIB)
            for i in range(10):
                self.assertEqual(s.put("all/%d" % i, b"x" * (i + 1)), 0)
            self.assertEqual(s.remove_all(), 10)
            self.assertEqual(s.list(""), [])
            self.assertEqual(s.put("all/after", b"y"), 0)
            self.assertEqual(s.get("all/after"), b"y")
            self.assertEqual(s.close(), 0)  # unmounts its 16 MiB segment (and what it held)
            pure = cluster.client()  # contributes no memory
            self.assertEqual(pure.put("loss/x", b"z"), 0)
            self.assertEqual(pure.get("loss/x"), b"z")
            # The master goes away: calls fail with codes (after the RPC timeout), nothing crashes.
            self.assertEqual(cluster.node.stop(signal_first=True), 0)
            self.assertEqual(cluster.master.stop(signal_first=True), 0)
            self.assertEqual(pure.health_check(), 2)  # Mooncake: 2 = master unreachable
            self.assertEqual(pure.get("loss/x"), b"")
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            s.close()
            if pure is not None:
                self.assertEqual(pure.close(), 0)
            cluster.stop()


if __name__ == "__main__":
    unittest.main()
