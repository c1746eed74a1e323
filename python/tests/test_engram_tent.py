"""EngramStore over a real cluster (master and storage node processes), and mooncake.tent
between two engines over loopback TCP."""

import ctypes
import logging
import unittest

import numpy as np

from _support import wait_for
from mooncake import store as store_mod, tent
from test_store import Cluster


class EngramTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.cluster = Cluster(segment_size="64MiB")
        try:
            cls.store = cls.cluster.client()
        except Exception:
            cls.cluster.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.store.close()
        cls.cluster.stop()

    def layer(self, layer_id, store=Ellipsis):
        cfg = store_mod.EngramStoreConfig()
        cfg.table_vocab_sizes = [17, 19, 23]
        cfg.embedding_dim = 8
        e = store_mod.EngramStore(layer_id, cfg, self.store if store is Ellipsis else store)
        tables = [np.arange(v * 8, dtype=np.float32).reshape(v, 8) + 1000 * h for h, v in enumerate(cfg.table_vocab_sizes)]
        return e, tables

    def test_populate_lookup_remove(self):
        e, tables = self.layer(7)
        self.assertEqual(e.get_store_keys(), ["engram:l7:h0", "engram:l7:h1", "engram:l7:h2"])
        self.assertIsNone(e.populate(tables))
        ids = np.array([[[0, 18, 22], [16, 1, 2]], [[3, 4, 5], [6, 7, 8]]])
        out = e.lookup(ids)
        self.assertEqual(out.shape, (2, 2, 3, 8))
        for b in range(2):
            for l in range(2):
                for h in range(3):
                    np.testing.assert_array_equal(out[b, l, h], tables[h][ids[b, l, h]])
        np.testing.assert_array_equal(e.lookup(ids.tolist()), out)
        direct = np.zeros_like(out)  # the rows were read by ranges, not by whole tables
        self.assertEqual(e._read_rows(self.store, ids, direct), 0)
        np.testing.assert_array_equal(direct, out)
        with self.assertRaises(RuntimeError):
            e.populate(tables)  # keys exist
        for bad in ([[[17, 0, 0]]], [], np.zeros((1, 1, 2), dtype=np.int64), [[[0, 0]]]):
            with self.assertRaises(RuntimeError):
                e.lookup(bad)
        self.assertEqual(e.remove_from_store(force=True), 3)
        self.assertEqual(e.remove_from_store(force=True), 0)
        with self.assertRaises(RuntimeError):
            e.lookup(ids)  # tables gone

    def test_capsule_wrapper_and_config_errors(self):
        cap = self.store._get_pyclient_capsule()
        self.assertEqual(type(cap).__name__, "PyCapsule")

        class Wrapper(object):
            def _get_pyclient_capsule(self_inner):
                return store_mod._get_pyclient_from_wrapper(self.store)

        e, tables = self.layer(8, Wrapper())
        tables[1] = tables[1][:-1]
        with self.assertRaisesRegex(RuntimeError, "shape"):
            e.populate(tables)
        e2, _ = self.layer(9, None)
        with self.assertRaises(RuntimeError):
            e2.lookup([[[0, 0, 0]]])
        cfg = store_mod.EngramStoreConfig()
        with self.assertRaises(ValueError):
            store_mod.EngramStore(1, cfg)
        self.assertIsNone(store_mod.MooncakeDistributedStore()._get_pyclient_capsule())


class TentTest(unittest.TestCase):
    def setUp(self):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        self.a, self.b = tent.TransferEngine(), tent.TransferEngine()
        self.addCleanup(self.b.close)
        self.addCleanup(self.a.close)

    def test_write_read_notify(self):
        a, b = self.a, self.b
        src = a.allocate_local_memory(1 << 20)
        dst = b.allocate_memory_guard(1 << 20)
        ctypes.memmove(src, b"0123456789", 10)
        sid = a.open_segment(b.get_segment_name())
        self.assertEqual(a.import_remote_segment(b.export_local_segment()) > 0, True)
        info = a.get_segment_info(sid)
        self.assertIn((dst.address(), 1 << 20), [(x.base, x.length) for x in info.buffers])
        with a.allocate_batch_guard(8) as bid:
            a.submit_transfer_notif(bid, [tent.Request(tent.WRITE, src, sid, dst.address(), 10),
                                          tent.Request(tent.WRITE, src, sid, dst.address() + 100, 4)], "done", "x")
            wait_for(lambda: a.get_transfer_status_overall(bid).state != tent.PENDING, 30)
            self.assertEqual(a.get_transfer_status_overall(bid).state, tent.COMPLETED)
            self.assertEqual([s.bytes for s in a.get_transfer_status_list(bid)], [10, 4])
            self.assertEqual(ctypes.string_at(dst.address(), 10), b"0123456789")
            got = []
            wait_for(lambda: got.extend(b.recv_notifi()) or got, 30)
            self.assertEqual((got[0].name, got[0].msg), ("done", "x"))
            # a read back, and a write outside the peer's memory that fails
            a.submit_transfer(bid, [tent.Request(tent.READ, src + 500, sid, dst.address() + 2, 3),
                                    tent.Request(tent.WRITE, src, sid, 4096, 8)])
            wait_for(lambda: all(a.get_transfer_status(bid, i).state != tent.PENDING for i in (2, 3)), 30)
            self.assertEqual(a.get_transfer_status(bid, 2).state, tent.COMPLETED)
            self.assertEqual(ctypes.string_at(src + 500, 3), b"234")
            self.assertEqual(a.get_transfer_status(bid, 3).state, tent.FAILED)
            self.assertEqual(a.get_transfer_status_overall(bid).state, tent.FAILED)
            with self.assertRaises(tent.NotImplementedError):
                a.cancel_transfer(bid, 0)
            with self.assertRaises(tent.InvalidArgumentError):
                a.get_transfer_status(bid, 99)
        dst.release()
        a.free_local_memory(src)

    def test_errors(self):
        a = self.a
        with self.assertRaises(tent.MetadataError):
            a.open_segment("127.0.0.1:1")
        with self.assertRaises(tent.InvalidArgumentError):
            a.free_local_memory(12345)
        with self.assertRaises(tent.DeviceNotFoundError):
            a.allocate_local_memory(4096, "cuda:0")
        with self.assertRaises(tent.InvalidArgumentError):
            a.import_remote_segment("{}")
        bid = a.allocate_transfer_batch(1)
        src = a.allocate_local_memory(4096)
        with self.assertRaises(tent.InvalidArgumentError):  # more requests than the batch holds
            a.submit_transfer(bid, [tent.Request(tent.READ, src, 0, src, 1)] * 2)
        a.free_transfer_batch(bid)
        with self.assertRaises(tent.InvalidArgumentError):
            a.free_transfer_batch(bid)
        self.assertEqual(a.open_segment(a.get_segment_name()), tent.LOCAL_SEGMENT_ID)
        self.assertEqual((tent.OpCode.WRITE, tent.TransportType.TCP, tent.GlobalReadWrite), (1, 7, 2))


if __name__ == "__main__":
    unittest.main()
