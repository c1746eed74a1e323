"""SSD offload (the disk tier behind this client's segment), extra segments (mount_segment
family) and put/get sessions of MooncakeDistributedStore, against a real master."""

import ctypes
import glob
import logging
import os
import tempfile
import time
import unittest
import urllib.request

import numpy as np

from _support import start_master, wait_for
from mooncake.store import ErrorCode, MooncakeDistributedStore, ReplicateConfig

MIB = 1 << 20
KIB = 1 << 10


def setup_store(addr, segment, **kw):
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", segment, 16 * MIB, "tcp", "", addr, **kw)
    if rc != 0:
        raise RuntimeError("setup failed: %d" % rc)
    return s


def kinds(store, key):
    out = []
    for r in store.get_replica_desc(key):
        out.append("MEMORY" if r.is_memory_replica() else "LOCAL_DISK" if r.is_local_disk_replica() else "DISK")
    return out


class SsdOffloadTest(unittest.TestCase):
    """setup(..., enable_ssd_offload=True, ssd_offload_path=DIR): evictions from this client's
    segment go to files under DIR, reads come back from them (counted by
    get_offload_rpc_read_count) and promote the value into memory."""

    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.master, cls.addr = start_master("--lease-ttl", "100ms")

    @classmethod
    def tearDownClass(cls):
        cls.master.stop(signal_first=True)
        logging.getLogger("mooncake").setLevel(logging.NOTSET)

    def test_offload_read_promote(self):
        with tempfile.TemporaryDirectory() as d:
            s = setup_store(self.addr, 4 * MIB, enable_ssd_offload=True, ssd_offload_path=d)
            try:
                # A second client cannot share the directory.
                other = MooncakeDistributedStore()
                self.assertLess(other.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MIB, 16 * MIB, "tcp", "", self.addr,
                                            None, True, d), 0)
                values = {}
                for i in range(24):  # 24 x 256 KiB into a 4 MiB segment: above the eviction watermark
                    k = "ssd/%d" % i
                    values[k] = np.random.default_rng(i).integers(0, 256, 256 * KIB, dtype=np.uint8).tobytes()
                    rc = s.put(k, values[k])
                    # -200: the pool is full of objects on their way to disk (freed at the next ping)
                    self.assertIn(rc, (0, ErrorCode.NO_AVAILABLE_HANDLE))
                    if rc != 0:
                        del values[k]
                    time.sleep(0.03)  # let the watermark eviction (which offloads) run before the pool is full

                def disk_only():
                    for k in values:
                        if kinds(s, k) == ["LOCAL_DISK"]:
                            return k
                    return None
                cold = wait_for(disk_only, timeout=20)
                self.assertTrue(glob.glob(os.path.join(d, "*.obj")), "no object file in the offload directory")
                desc = s.get_replica_desc(cold)[0].get_disk_descriptor()
                self.assertEqual(desc.object_size, 256 * KIB)
                with urllib.request.urlopen(desc.file_path, timeout=10) as resp:  # the copy's URL serves the value
                    self.assertEqual(resp.read(), values[cold])
                before = s.get_offload_rpc_read_count()
                self.assertEqual(s.get(cold), values[cold])
                self.assertEqual(s.get_offload_rpc_read_count(), before + 1)
                # Promotion on hit: the value is put back into memory; reads then skip the disk.
                wait_for(lambda: "MEMORY" in kinds(s, cold), timeout=20)
                n = s.get_offload_rpc_read_count()
                self.assertEqual(s.get(cold), values[cold])
                self.assertEqual(s.get_offload_rpc_read_count(), n)
                self.assertEqual(s.remove(cold, force=True), 0)
            finally:
                s.close()

    def test_env_path_and_no_segment(self):
        with tempfile.TemporaryDirectory() as d:
            os.environ["MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"] = d
            try:
                s = setup_store(self.addr, 4 * MIB, enable_ssd_offload=True)
                s.close()
                self.assertTrue(os.path.exists(os.path.join(d, ".lock")), "the tier did not open the env's directory")
            finally:
                del os.environ["MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"]
            # No segment: nothing to offload; setup succeeds without a disk tier.
            s = setup_store(self.addr, 0, enable_ssd_offload=True, ssd_offload_path=os.path.join(d, "unused"))
            s.close()
            self.assertFalse(os.path.exists(os.path.join(d, "unused")))


class SegmentsAndSessionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.master, cls.addr = start_master("--lease-ttl", "100ms")
        cls.owner = setup_store(cls.addr, 4 * MIB)   # mounts extra segments
        cls.user = setup_store(cls.addr, 0)          # a pure client

    @classmethod
    def tearDownClass(cls):
        cls.user.close()
        cls.owner.close()
        cls.master.stop(signal_first=True)
        logging.getLogger("mooncake").setLevel(logging.NOTSET)

    def test_mount_segment_family(self):
        s = self.owner
        with tempfile.NamedTemporaryFile() as f:
            f.truncate(2 * MIB)
            f.flush()
            self.assertEqual(s.mount_segment(f.name, MIB, offset=1), {"ret": -1, "segment_ids": []})
            self.assertEqual(s.mount_segment(f.name, 4 * MIB)["ret"], -1)  # past the end
            r = s.mount_segment(f.name, MIB, offset=MIB, protocol="tcp", location="cpu:0")
            self.assertEqual(r["ret"], 0)
            self.assertEqual(len(r["segment_ids"]), 1)
            sid = r["segment_ids"][0]
            self.assertRegex(sid, r"^\d+-\d+$")  # Mooncake's UUID string
            cfg = ReplicateConfig()
            cfg.preferred_segment = sid
            v = b"in the mounted file " * 50
            self.assertEqual(self.user.put("seg/k", v, cfg), 0)
            self.assertEqual(self.user.get("seg/k"), v)
            with open(f.name, "rb") as g:
                self.assertIn(v, g.read()[MIB:])
            self.assertEqual(s.unmount_segment([sid, "1-2"]), -1)  # unknown id: -1, the known one is unmounted
            self.assertEqual(self.user.get("seg/k"), b"")
            self.assertEqual(s.unmount_segment([sid]), -1)
        a = s.allocate_and_mount_segment(1)
        self.assertEqual((a["ret"], a["allocated_size"], len(a["segment_ids"])), (0, 4 * MIB, 1))
        cfg = ReplicateConfig()
        cfg.preferred_segments = a["segment_ids"]
        self.assertEqual(self.user.put("seg/a", b"x" * 1000, cfg), 0)
        self.assertEqual(s.unmount_and_free_segment(a["segment_ids"], grace_period_seconds=0), 0)
        self.assertEqual(s.allocate_and_mount_segment(0)["ret"], -1)
        self.assertEqual(MooncakeDistributedStore().mount_segment("/dev/null", MIB)["ret"], -1)  # not set up
        self.assertEqual(s.unmount_local_disk_segment(), ErrorCode.NOT_SUPPORTED)

    def test_put_session(self):
        s = self.user
        a = np.arange(1000, dtype=np.uint8)
        b = np.full(500, 7, dtype=np.uint8)
        self.assertEqual(s.put("sess/exists", b"x"), 0)
        self.assertEqual(s.batch_put_session_start(["sess/p", "sess/q", "sess/exists"], [1500, 10, 3]),
                         [0, 0, ErrorCode.OBJECT_ALREADY_EXISTS])
        self.assertEqual(s.batch_put_session_start(["sess/p", "sess/z"], [5, 0]),
                         [ErrorCode.INVALID_PARAMS] * 2)  # already open; empty
        self.assertEqual(s.batch_put_session_start(["sess/x"], [1, 2]), [ErrorCode.INVALID_PARAMS])
        self.assertEqual(s.is_exist("sess/p"), 0)  # invisible until the end
        res = s.batch_put_from_multi_buffer_ranges(
            ["sess/p", "sess/q", "sess/none"], [[b.ctypes.data, a.ctypes.data], [a.ctypes.data], [a.ctypes.data]],
            [[500, 1000], [11], [1]], [[1000, 0], [0], [0]])
        self.assertEqual(res, [1500, ErrorCode.INVALID_PARAMS, ErrorCode.INVALID_PARAMS])  # q: range past its size
        self.assertEqual(s.batch_put_session_end(["sess/p", "sess/none"]), [0, ErrorCode.INVALID_PARAMS])
        self.assertEqual(s.get("sess/p"), a.tobytes() + b.tobytes())
        self.assertEqual(s.batch_put_session_revoke(["sess/q", "sess/q"]), [0, ErrorCode.INVALID_PARAMS])
        self.assertEqual(s.is_exist("sess/q"), 0)
        self.assertEqual(s.batch_put_session_start(["sess/r"], [1], ReplicateConfig()), [0])
        self.assertEqual(s.batch_put_from_multi_buffer_ranges(["sess/r"], [[a.ctypes.data]], [[1]], [[0], [0]]),
                         [ErrorCode.INVALID_PARAMS])  # lists of different lengths
        self.assertEqual(s.batch_put_session_revoke(["sess/r"]), [0])

    def test_get_session(self):
        s = self.user
        v = np.random.default_rng(3).integers(0, 256, 300 * KIB, dtype=np.uint8)
        self.assertEqual(s.put("sess/g", v.tobytes()), 0)
        self.assertEqual(s.batch_get_session_start(["sess/g", "sess/missing"]), [0, ErrorCode.OBJECT_NOT_FOUND])
        d1 = np.zeros(1000, dtype=np.uint8)
        d2 = np.zeros(10, dtype=np.uint8)
        res = s.batch_get_into_multi_buffer_ranges(["sess/g", "sess/missing"], [[d1.ctypes.data, d2.ctypes.data],
                                                                                [d2.ctypes.data]],
                                                   [[1000, 10], [1]], [[5000, 300 * KIB - 10], [0]])
        self.assertEqual(res, [1010, ErrorCode.INVALID_PARAMS])  # no session for a missing key
        self.assertTrue(np.array_equal(d1, v[5000:6000]))
        self.assertTrue(np.array_equal(d2, v[-10:]))
        self.assertEqual(s.batch_get_into_multi_buffer_ranges(["sess/g"], [[d2.ctypes.data]], [[10]],
                                                              [[300 * KIB - 5]]), [ErrorCode.INVALID_PARAMS])
        self.assertEqual(s.batch_get_session_end(["sess/g"]), 0)
        self.assertEqual(s.batch_get_into_multi_buffer_ranges(["sess/g"], [[d2.ctypes.data]], [[1]], [[0]]),
                         [ErrorCode.INVALID_PARAMS])  # the session ended
        self.assertEqual(MooncakeDistributedStore().batch_get_session_end(["x"]), -1)


class MasterDiskFlagsTest(unittest.TestCase):
    def test_client_enable_offload(self):
        from mooncake.cli import client_argv
        os.environ["MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"] = "/tmp/ssd"
        try:
            argv = client_argv({"enable_offload": "true", "start_offload_rpc_server": "true", "port": "50052"})
        finally:
            del os.environ["MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"]
        self.assertEqual(argv, ["client", "--port", "50052", "--transport", "tcp", "--enable-offload",
                                "--root-fs-dir", "/tmp/ssd", "--disk-capacity", str(2 << 40)])
        self.assertNotIn("--enable-offload", client_argv({"enable_offload": "false"}))

    def test_master_disk_flags_point_to_the_client(self):
        import contextlib
        import io
        from mooncake.cli import master_argv
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            argv, meta = master_argv({"port": "50051", "root_fs_dir": "/x", "enable_offload": "true",
                                      "offload_on_evict": "true", "promotion_on_hit": "true"})
        self.assertEqual((argv, meta), (["master", "--port", "50051"], None))
        self.assertIn("enable_ssd_offload=True", err.getvalue())
        self.assertIn("--root_fs_dir", err.getvalue())


if __name__ == "__main__":
    unittest.main()
