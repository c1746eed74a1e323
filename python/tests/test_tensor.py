"""The tensor API of MooncakeDistributedStore: a master and two store clients (the
second reads what the first wrote), torch tensors (skipped without torch) and numpy arrays."""

import ctypes
import logging
import os
import struct
import tempfile
import unittest

import numpy as np

from _support import start_master
from mooncake import store as mstore
from mooncake.store import MooncakeDistributedStore, ParallelAxis, ReadTarget, TensorParallelism

try:
    import torch
except ImportError:
    torch = None

needs_torch = unittest.skipIf(torch is None, "python3-torch is not installed")
INVALID = -600


def _client(addr):
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", addr)
    if rc != 0:
        raise RuntimeError("setup: %d" % rc)
    return s


def _axis(kind, rank, size, split_dim=None):
    a = ParallelAxis()
    a.kind, a.rank, a.size, a.split_dim = kind, rank, size, split_dim
    return a


class TensorCodecTest(unittest.TestCase):
    def test_header_layout(self):
        self.assertEqual(mstore._tensor_metadata_size(), 304)
        a = np.arange(12, dtype=np.int32).reshape(3, 4)
        hdr, ptr, n, owner = mstore._serialize_tensor(a)
        self.assertEqual((len(hdr), n), (304, 48))
        magic, ver, hsize, dtype, ndim, kind, _f, doff, dbytes = struct.unpack_from("<IHHiiIIQQ", hdr)
        self.assertEqual((magic, ver, hsize, dtype, ndim, kind, doff, dbytes), (0x4d4f4f4e, 1, 304, 6, 2, 0, 304, 48))
        self.assertEqual(struct.unpack_from("<8q", hdr, 40), (3, 4, -1, -1, -1, -1, -1, -1))
        back = mstore._deserialize_tensor(hdr + ctypes.string_at(ptr, n))
        self.assertEqual(np.asarray(back).tolist(), a.tolist())
        with self.assertRaises(ValueError):
            mstore._deserialize_tensor(b"x" * 400)
        with self.assertRaises(ValueError):
            mstore._deserialize_tensor(hdr + b"short")

    @needs_torch
    def test_torch_dtypes_round_trip(self):
        for dt in (torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                   torch.bool, torch.float16, torch.bfloat16):
            t = (torch.arange(24) % 2 == 0) if dt == torch.bool else torch.arange(24).to(dt)
            t = t.reshape(2, 3, 4)
            hdr, ptr, n, _ = mstore._serialize_tensor(t)
            back = mstore._deserialize_tensor(hdr + ctypes.string_at(ptr, n))
            self.assertEqual(back.dtype, dt)
            self.assertTrue(torch.equal(back, t), dt)


class TensorStoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.master, cls.addr = start_master()
        cls.a = _client(cls.addr)
        cls.b = _client(cls.addr)

    @classmethod
    def tearDownClass(cls):
        cls.a.close()
        cls.b.close()
        cls.master.stop(signal_first=True)
        logging.getLogger("mooncake").setLevel(logging.NOTSET)

    def test_numpy_put_get_across_clients(self):
        a = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
        self.assertEqual(self.a.put_tensor("np/a", a), 0)
        got = self.b.get_tensor("np/a")
        self.assertEqual(tuple(got.shape), (16, 8))
        self.assertTrue(np.array_equal(np.asarray(got), a))
        self.assertEqual(self.a.get_size("np/a"), 304 + a.nbytes)
        self.assertIsNone(self.b.get_tensor("np/missing"))
        self.assertEqual(self.a.put_tensor("np/bad", b"bytes"), INVALID)
        # a plain value is not a tensor
        self.assertEqual(self.a.put("np/plain", b"x" * 400), 0)
        self.assertIsNone(self.b.get_tensor("np/plain"))
        # non-contiguous input is made contiguous
        self.assertEqual(self.a.put_tensor("np/t", a.T), 0)
        self.assertTrue(np.array_equal(np.asarray(self.b.get_tensor("np/t")), a.T))

    @needs_torch
    def test_torch_put_get_batch_upsert(self):
        ts = [torch.randn(4, 5), torch.arange(10, dtype=torch.int64), torch.ones(3, 3, dtype=torch.bfloat16)]
        keys = ["t/%d" % i for i in range(3)]
        self.assertEqual(self.a.batch_put_tensor(keys, ts), [0, 0, 0])
        got = self.b.batch_get_tensor(keys + ["t/none"])
        for g, t in zip(got, ts):
            self.assertEqual(g.dtype, t.dtype)
            self.assertTrue(torch.equal(g, t))
        self.assertIsNone(got[3])
        self.assertEqual(self.a.batch_put_tensor(keys, ts[:2]), [INVALID] * 3)
        # put keeps, upsert replaces (also right after a read: no lease check)
        self.assertEqual(self.a.put_tensor("t/0", torch.zeros(2)), 0)
        self.assertTrue(torch.equal(self.b.get_tensor("t/0"), ts[0]))
        self.assertEqual(self.a.put_tensor("t/u", torch.ones(2)), 0)
        self.assertEqual(self.a.upsert_tensor("t/u", torch.zeros(2)), 0)
        self.assertTrue(torch.equal(self.b.get_tensor("t/u"), torch.zeros(2)))
        self.assertEqual(self.a.put_tensor("t/u1", torch.zeros(1)), 0)
        self.assertEqual(self.a.batch_upsert_tensor(["t/u1"], [torch.ones(1)]), [0])
        self.assertTrue(torch.equal(self.b.get_tensor("t/u1"), torch.ones(1)))
        cfg = mstore.ReplicateConfig()
        cfg.replica_num = 1
        self.assertEqual(self.a.pub_tensor("t/pub", torch.ones(5), cfg), 0)
        self.assertEqual(self.a.batch_pub_tensor(["t/p1", "t/p2"], [torch.ones(1), torch.ones(2)], cfg), [0, 0])
        self.assertEqual(self.a.upsert_pub_tensor("t/pub", torch.zeros(5), cfg), 0)
        self.assertTrue(torch.equal(self.b.get_tensor("t/pub"), torch.zeros(5)))
        self.assertEqual(self.a.batch_upsert_pub_tensor(["t/p1"], [torch.zeros(1)], cfg), [0])

    @needs_torch
    def test_into_and_from_registered_buffers(self):
        t = torch.randn(64, 32)
        self.assertEqual(self.a.put_tensor("into/t", t), 0)
        size = 304 + t.numel() * 4
        buf = np.zeros(2 * size, dtype=np.uint8)
        self.assertEqual(self.b.register_buffer(buf.ctypes.data, buf.nbytes), 0)
        try:
            got = self.b.get_tensor_into("into/t", buf.ctypes.data, size)
            self.assertTrue(torch.equal(got, t))
            # the result views the buffer
            self.assertEqual(got.data_ptr(), buf.ctypes.data + 304)
            self.assertIsNone(self.b.get_tensor_into("into/missing", buf.ctypes.data, size))
            self.assertIsNone(self.b.get_tensor_into("into/t", buf.ctypes.data, 100))
            res = self.b.batch_get_tensor_into(["into/t", "into/missing"], [buf.ctypes.data, buf.ctypes.data + size],
                                               [size, size])
            self.assertTrue(torch.equal(res[0], t))
            self.assertIsNone(res[1])
            self.assertEqual(self.b.batch_get_tensor_into(["a"], [1, 2], [3]), [INVALID])
            # the buffer now holds [header][data]: put it back from there
            self.assertEqual(self.b.put_tensor_from("from/t", buf.ctypes.data, size), 0)
            self.assertTrue(torch.equal(self.a.get_tensor("from/t"), t))
            self.assertEqual(self.b.batch_put_tensor_from(["from/u", "from/bad"], [buf.ctypes.data, buf.ctypes.data],
                                                          [size, 200]), [0, INVALID])
            self.assertEqual(self.b.upsert_tensor_from("from/u", buf.ctypes.data, size), 0)
            self.assertEqual(self.b.batch_upsert_tensor_from(["from/u"], [buf.ctypes.data], [size]), [0])
            # TP from a buffer: split into two shards
            self.assertEqual(self.b.put_tensor_with_tp_from("from/tp", buf.ctypes.data, size, tp_size=2,
                                                            split_dim=1), 0)
            self.assertTrue(torch.equal(self.a.get_tensor_with_tp("from/tp", tp_rank=1, tp_size=2), t[:, 16:]))
            self.assertEqual(self.b.batch_put_tensor_with_tp_from(["from/tp2"], [buf.ctypes.data], [size],
                                                                  tp_size=4), [0])
            self.assertTrue(torch.equal(self.a.get_tensor("from/tp2_tp_3"), t[48:]))
        finally:
            self.b.unregister_buffer(buf.ctypes.data)

    @needs_torch
    def test_tensor_parallel(self):
        t = torch.arange(48, dtype=torch.float32).reshape(6, 8)
        self.assertEqual(self.a.put_tensor_with_tp("tp/w", t, tp_size=2, split_dim=1), 0)
        for r in range(2):
            shard = self.b.get_tensor_with_tp("tp/w", tp_rank=r, tp_size=2, split_dim=1)
            self.assertTrue(torch.equal(shard, t[:, 4 * r:4 * (r + 1)]))
            self.assertTrue(torch.equal(self.b.get_tensor("tp/w_tp_%d" % r), shard))
        # the shard's header records the layout: SHARD, global (6, 8), local (6, 4), one TP axis
        raw = self.b.get("tp/w_tp_1")
        self.assertEqual(struct.unpack_from("<I", raw, 16)[0], 1)
        self.assertEqual(struct.unpack_from("<2q", raw, 40), (6, 8))
        self.assertEqual(struct.unpack_from("<2q", raw, 104), (6, 4))
        self.assertEqual(struct.unpack_from("<I", raw, 168)[0], 1)
        self.assertEqual(struct.unpack_from("<iiiiiiq", raw, 176), (1, 0, 1, 2, 1, 0, 4))
        # uneven split is refused
        self.assertEqual(self.a.put_tensor_with_tp("tp/odd", torch.ones(5, 3), tp_size=2), INVALID)
        # tp_size 1 is a plain put
        self.assertEqual(self.a.put_tensor_with_tp("tp/one", t), 0)
        self.assertTrue(torch.equal(self.b.get_tensor_with_tp("tp/one"), t))
        res = self.a.batch_put_tensor_with_tp(["tp/b1", "tp/b2", "tp/b3"], [t, t * 2, torch.ones(3)], tp_size=2)
        self.assertEqual(res, [0, 0, INVALID])
        got = self.b.batch_get_tensor_with_tp(["tp/b1", "tp/b2"], tp_rank=1, tp_size=2)
        self.assertTrue(torch.equal(got[0], t[3:]))
        self.assertTrue(torch.equal(got[1], t[3:] * 2))
        self.assertEqual(self.a.pub_tensor_with_tp("tp/pub", t, None, tp_size=3, split_dim=0), 0)
        self.assertEqual(self.a.batch_pub_tensor_with_tp(["tp/pub2"], [t], tp_size=2), [0])
        size = 304 + 24 * 4
        buf = np.zeros(2 * size, dtype=np.uint8)
        self.assertTrue(torch.equal(self.b.get_tensor_with_tp_into("tp/w", buf.ctypes.data, size, 0, 2), t[:, :4]))
        res = self.b.batch_get_tensor_with_tp_into(["tp/b1", "tp/b2"], [buf.ctypes.data, buf.ctypes.data + size],
                                                   [size, size], tp_rank=0, tp_size=2)
        self.assertTrue(torch.equal(res[0], t[:3]))
        self.assertTrue(torch.equal(res[1], t[:3] * 2))

    @needs_torch
    def test_parallelism_descriptors(self):
        t = torch.arange(32, dtype=torch.int32).reshape(4, 8)
        tp = TensorParallelism()
        tp.axes = [_axis("tp", 0, 2, 1)]
        # a single TP axis: the tensor given is this rank's shard, stored under the TP key
        for r in range(2):
            pr = TensorParallelism()
            pr.axes = [_axis("tp", r, 2, 1)]
            self.assertEqual(self.a.put_tensor_with_parallelism("par/w", t[:, 4 * r:4 * r + 4].contiguous(), pr), 0)
        self.assertTrue(torch.equal(self.b.get_tensor("par/w_tp_1"), t[:, 4:]))
        target = ReadTarget()
        target.mode = "shard"
        p1 = TensorParallelism()
        p1.axes = [_axis("TP", 1, 2, 1)]
        target.parallelism = p1
        self.assertTrue(torch.equal(self.b.get_tensor_with_parallelism("par/w", target), t[:, 4:]))
        # another TP size: cut from the whole tensor; an uneven one has no shard
        p4 = TensorParallelism()
        p4.axes = [_axis("tp", 3, 4, 1)]
        t4 = ReadTarget()
        t4.mode, t4.parallelism = "shard", p4
        self.assertTrue(torch.equal(self.b.get_tensor_with_parallelism("par/w", t4), t[:, 6:]))
        p3 = TensorParallelism()
        p3.axes = [_axis("tp", 0, 3, 1)]
        t4.parallelism = p3
        self.assertIsNone(self.b.get_tensor_with_parallelism("par/w", t4))
        target.mode = "full"
        self.assertTrue(torch.equal(self.b.get_tensor_with_parallelism("par/w", target), t))
        self.assertTrue(torch.equal(self.b.batch_get_tensor_with_parallelism(["par/w"], [target])[0], t))
        full = ReadTarget()
        full.mode = "full"  # no parallelism: the writers' manifest says how to rebuild it
        self.assertTrue(torch.equal(self.b.get_tensor_with_parallelism("par/w", full), t))
        size = 304 + t.numel() * 4
        buf = np.zeros(size, dtype=np.uint8)
        self.assertTrue(torch.equal(self.b.get_tensor_with_parallelism_into("par/w", buf.ctypes.data, size, target),
                                    t))
        # only rank 0 of 2 written: no other shard, no whole tensor to cut one from
        self.assertEqual(self.a.put_tensor_with_parallelism("par/half", t[:, :4].contiguous(), tp), 0)
        t4.parallelism = p4
        self.assertIsNone(self.b.get_tensor_with_parallelism("par/half", t4))
        # two axes: DP and TP; the whole tensor is given and this rank's chunk stored, keys carry both
        p2 = TensorParallelism()
        p2.axes = [_axis("tp", 1, 2, 0), _axis("dp", 1, 2)]
        self.assertEqual(self.a.put_tensor_with_parallelism("par/m", t, p2), 0)
        self.assertTrue(torch.equal(self.b.get_tensor("par/m__dp_1of2__tp_1of2_sd0"), t[2:]))
        p2.axes = [_axis("tp", 0, 2, 0), _axis("dp", 1, 2)]
        self.assertEqual(self.a.put_tensor_with_parallelism("par/m", t, p2), 0)
        tm = ReadTarget()
        tm.mode, tm.parallelism = "full", p2
        self.assertTrue(torch.equal(self.b.get_tensor_with_parallelism("par/m", tm), t))
        bad3 = TensorParallelism()
        bad3.axes = [_axis("tp", 0, 3, 0), _axis("dp", 0, 2)]
        self.assertEqual(self.a.put_tensor_with_parallelism("par/m3", t, bad3), INVALID)  # 4 rows into 3
        # writer partitions: every writer holds the whole tensor and stores its chunk
        for r in range(2):
            self.assertEqual(self.a.put_tensor_with_parallelism("par/wp", t, writer_partition={
                "rank": r, "size": 2, "split_dim": 1}), 0)
        self.assertTrue(torch.equal(self.b.get_tensor("par/wp__writer_1of2_sd1"), t[:, 4:]))
        self.assertTrue(torch.equal(self.b.get_tensor_with_parallelism("par/wp", full), t))
        self.assertTrue(torch.equal(self.b.get_tensor_with_parallelism("par/wp", target), t))
        target.mode = "shard"
        self.assertTrue(torch.equal(self.b.get_tensor_with_parallelism("par/wp", target), t[:, 4:]))
        self.assertEqual(self.a.put_tensor_with_parallelism("par/wp3", t, writer_partition={
            "rank": 0, "size": 3, "split_dim": 1}), INVALID)
        # axis fields Mooncake refuses
        for kind, kw in (("dp", {"split_dim": 0}), ("ep", {})):
            pb = TensorParallelism()
            pb.axes = [_axis(kind, 0, 2, kw.get("split_dim"))]
            self.assertEqual(self.a.put_tensor_with_parallelism("par/bad", t, pb), INVALID)
        # no descriptor: a full object
        self.assertEqual(self.a.put_tensor_with_parallelism("par/full", t), 0)
        self.assertTrue(torch.equal(self.b.get_tensor_with_parallelism("par/full"), t))
        self.assertEqual(self.a.put_tensor_with_parallelism("par/x", t, tp, writer_partition={"rank": 0}), INVALID)
        bad = TensorParallelism()
        bad.axes = [_axis("zz", 0, 1)]
        self.assertEqual(self.a.batch_put_tensor_with_parallelism(["par/y"], [t], [bad]), [INVALID])
        self.assertEqual(self.a.put_tensor_with_parallelism("par/up", t), 0)
        self.assertEqual(self.a.upsert_tensor_with_parallelism("par/up", t * 0), 0)
        self.assertTrue(torch.equal(self.b.get_tensor("par/up"), t * 0))
        hdr, ptr, n, _ = mstore._serialize_tensor(t)
        obj = np.frombuffer(hdr + ctypes.string_at(ptr, n), dtype=np.uint8).copy()
        self.assertEqual(self.a.put_tensor_with_parallelism_from("par/from", obj.ctypes.data, obj.nbytes, tp), 0)
        self.assertTrue(torch.equal(self.b.get_tensor("par/from_tp_0"), t[:, :4]))
        self.assertEqual(self.a.batch_upsert_tensor_with_parallelism_from(["par/from"], [obj.ctypes.data],
                                                                          [obj.nbytes]), [0])

    @needs_torch
    def test_safetensors(self):
        t = torch.randn(3, 7)
        self.assertEqual(self.a.put_tensor("st/w", t), 0)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "w.safetensors")
            self.assertEqual(self.a.save_tensor_to_safetensor("st/w", path), 0)
            self.assertEqual(self.a.save_tensor_to_safetensor("st/missing", path + "x"), -1100)
            with open(path, "rb") as f:
                raw = f.read()
            (n,) = struct.unpack_from("<Q", raw)
            self.assertIn(b'"F32"', raw[8:8 + n])
            got = self.b.load_tensor_from_safetensor("st/copy", path)
            self.assertTrue(torch.equal(got, t))
            self.assertTrue(torch.equal(self.a.get_tensor("st/copy"), t))
            self.assertIsNone(self.b.load_tensor_from_safetensor("st/x", os.path.join(d, "none")))

    def test_cuda_reads_answer_invalid(self):
        self.assertEqual(self.a.get_tensor_into_cuda("k", None), INVALID)
        self.assertEqual(self.a.batch_get_tensor_into_cuda(["k", "l"], [None, None]), [INVALID, INVALID])

    def test_not_set_up(self):
        s = MooncakeDistributedStore()
        self.assertEqual(s.put_tensor("k", np.ones(2)), INVALID)
        self.assertIsNone(s.get_tensor("k"))
        self.assertEqual(s.batch_get_tensor(["a", "b"]), [None, None])


if __name__ == "__main__":
    unittest.main()
