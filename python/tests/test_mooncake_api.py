"""Mooncake's Python surface: module types, mooncake_config, engine additions, store methods.

The store tests run a master (short lease) and a client that contributes its
own segment, as Mooncake's own store tests do.
"""

import ctypes
import json
import logging
import os
import tempfile
import unittest

import mooncake
from mooncake import engine as mc_engine
from mooncake import mooncake_config as mcc
from mooncake import store as mc_store
from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode
from mooncake.store import (BufferHandle, ErrorCode, MooncakeDistributedStore, ObjectDataType, QueryTaskResponse,
                            ReadTarget, ReplicaDescriptor, ReplicaStatus, ReplicateConfig, SoftPinAction, TaskStatus,
                            TaskType)

from _support import start_master, wait_for

MIB = 1 << 20


class StoreTypesTest(unittest.TestCase):
    def test_enum_values(self):
        self.assertEqual([int(x) for x in SoftPinAction], [0, 1, 2])
        self.assertEqual(SoftPinAction.ENABLE.name, "ENABLE")
        self.assertEqual(int(ObjectDataType.GENERAL), 9)
        self.assertEqual(int(ReplicaStatus.COMPLETE), 3)
        self.assertEqual((int(TaskType.REPLICA_COPY), int(TaskType.REPLICA_MOVE)), (0, 1))
        self.assertEqual((int(TaskStatus.FAILED), int(TaskStatus.SUCCESS)), (2, 3))
        # export_values: enum members at module level, TaskStatus last as in Mooncake.
        self.assertIs(mc_store.KVCACHE, ObjectDataType.KVCACHE)
        self.assertIs(mc_store.REPLICA_MOVE, TaskType.REPLICA_MOVE)
        self.assertIs(mc_store.PROCESSING, TaskStatus.PROCESSING)
        for name in ("MemoryDescriptor", "DiskDescriptor", "Descriptor", "ParallelAxis", "TensorParallelism",
                     "MooncakeHostMemAllocator", "MooncakeDistributedNoFRegister", "BufferPool",
                     "bind_to_numa_node", "get_alloc_func_addr", "get_free_func_addr"):
            self.assertTrue(hasattr(mc_store, name), name)

    def test_replicate_config(self):
        c = ReplicateConfig()
        self.assertEqual((c.replica_num, c.nof_replica_num, c.dfs_replica_num), (1, 0, 0))
        self.assertEqual(c.soft_pin_action, SoftPinAction.PRESERVE)
        self.assertIsNone(c.soft_pin_ttl_ms)
        self.assertFalse(c.with_hard_pin)
        self.assertEqual((c.preferred_segment, c.preferred_segments, c.preferred_nof_segments), ("", [], []))
        self.assertFalse(c.prefer_alloc_in_same_node)
        self.assertEqual(c.data_type, ObjectDataType.UNKNOWN)
        self.assertIsNone(c.group_ids)
        c.soft_pin_ttl_ms = 1000
        self.assertEqual(c.soft_pin_ttl_ms, 1000)
        for bad in (-1, 1 << 64, "1", 1.5):
            with self.assertRaises(TypeError):
                c.soft_pin_ttl_ms = bad
        with self.assertRaises(TypeError):
            c.replica_num = -1
        with self.assertRaises(TypeError):
            c.group_ids = "abc"
        c.group_ids = ["g", ""]
        self.assertEqual(c.group_ids, ["g", ""])
        c.with_soft_pin = True  # the older boolean spelling
        self.assertEqual(c.soft_pin_action, SoftPinAction.ENABLE)
        c.with_soft_pin = False
        self.assertEqual(c.soft_pin_action, SoftPinAction.PRESERVE)
        c.replica_num = 3
        c.preferred_segment = "a:1"
        c.preferred_segments = ["b:2", "a:1"]
        self.assertEqual(c.segments(), ["b:2", "a:1"])
        self.assertIn("3", str(c))
        legacy = ReplicateConfig(replica_num=2, with_soft_pin=True)
        self.assertEqual((legacy.replica_num, legacy.soft_pin_action), (2, SoftPinAction.ENABLE))

    def test_descriptors(self):
        d = mc_store.Descriptor(size=8, buffer_address=16, transport_endpoint="h:1")
        r = ReplicaDescriptor(ReplicaStatus.COMPLETE, memory=mc_store.MemoryDescriptor(d))
        self.assertTrue(r.is_memory_replica())
        self.assertFalse(r.is_disk_replica() or r.is_local_disk_replica())
        self.assertIs(r.get_memory_descriptor().buffer_descriptor, d)
        with self.assertRaises(RuntimeError):
            r.get_disk_descriptor()
        q = QueryTaskResponse()
        self.assertEqual((q.type, q.status), (TaskType.REPLICA_COPY, TaskStatus.PENDING))
        self.assertIn("QueryTaskResponse(", repr(q))
        t = ReadTarget()
        self.assertEqual(t.mode, "as_stored")
        t.mode = "SHARD"
        self.assertEqual(t.mode, "shard")
        with self.assertRaises(RuntimeError):
            t.mode = "sideways"

    def test_buffer_handle(self):
        h = BufferHandle(b"abc")
        self.assertEqual((h.size(), len(h), bytes(h)), (3, 3, b"abc"))
        self.assertEqual(ctypes.string_at(h.ptr(), 3), b"abc")
        self.assertEqual(BufferHandle(b"").ptr(), 0)
        self.assertEqual(memoryview(h).tobytes(), b"abc")
        import numpy as np
        self.assertEqual(np.frombuffer(h, dtype=np.uint8).tolist(), [97, 98, 99])
        with self.assertRaises(BufferError):
            h.append(1)  # the memory is pinned: ptr() stays valid

    def test_host_allocator_and_helpers(self):
        a = mc_store.MooncakeHostMemAllocator()
        p = a.alloc(100)
        self.assertNotEqual(p, 0)
        self.assertEqual(p % 4096, 0)
        ctypes.memset(p, 7, 100)
        self.assertEqual(a.free(p), 0)
        self.assertNotEqual(mc_store.get_alloc_func_addr(), 0)
        self.assertNotEqual(mc_store.get_free_func_addr(), 0)
        with self.assertLogs("mooncake", level="ERROR"):
            self.assertEqual(mc_store.MooncakeDistributedNoFRegister().real_register(), -1)
        with self.assertLogs("mooncake", level="WARNING"):
            mc_store.bind_to_numa_node(1 << 20)  # no such node: a warning, nothing bound

    def test_top_level(self):
        self.assertIs(mooncake.BufferPool, mooncake.RegisteredBufferPool)
        self.assertIs(mooncake.BufferPool, mc_store.BufferPool)


class MooncakeConfigModuleTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "c.json")
        self.saved = {k: os.environ.pop(k, None) for k in ("MOONCAKE_CONFIG_PATH", "MOONCAKE_MASTER",
                                                            "MOONCAKE_PROTOCOL", "MOONCAKE_GLOBAL_SEGMENT_SIZE")}

    def tearDown(self):
        self.tmp.cleanup()
        for k, v in self.saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v

    def write(self, d):
        with open(self.path, "w") as f:
            json.dump(d, f)

    def test_required_fields(self):
        self.write({"local_hostname": "h", "metadata_server": "m"})
        with self.assertRaisesRegex(ValueError, "Missing required config field: master_server_address"):
            mcc.MooncakeConfig.from_file(self.path)
        with self.assertRaisesRegex(ValueError, "MOONCAKE_CONFIG_PATH"):
            mcc.MooncakeConfig.load_from_env()

    def test_protocol_and_sizes(self):
        self.write({"local_hostname": "h", "metadata_server": "m", "master_server_address": "a:1",
                    "protocol": " TCP ", "global_segment_size": "4gb", "local_buffer_size": "1e9",
                    "enable_ssd_offload": "off"})
        c = mcc.MooncakeConfig.from_file(self.path)
        self.assertEqual((c.protocol, c.global_segment_size, c.local_buffer_size), ("tcp", 4 << 30, 10 ** 9))
        self.assertFalse(c.enable_ssd_offload)
        self.assertEqual((c.tenant_id, c.client_http_port), ("default", 9300))
        with self.assertRaisesRegex(ValueError, "Invalid protocol"):
            mcc.MooncakeConfig("h", "m", 0, 0, "  ", "", "a:1")
        with self.assertLogs(mcc.logger, level="WARNING"):
            self.assertEqual(mcc.MooncakeConfig("h", "m", 0, 0, "Pigeon", "", "a:1").protocol, "pigeon")
        with self.assertRaises(ValueError):
            mcc.MooncakeConfig("h", "m", -1, 0, "tcp", "", "a:1")
        self.assertEqual(mcc._parse_segment_size(" 3 GB "), 3 << 30)
        for bad in ("", "gb", "abc"):
            with self.assertRaises(ValueError):
                mcc._parse_segment_size(bad)
        with self.assertRaises(ValueError):
            mcc._parse_bool("maybe")

    def test_env(self):
        os.environ["MOONCAKE_MASTER"] = "10.0.0.1:50051"
        os.environ["MOONCAKE_PROTOCOL"] = "RDMA"
        os.environ["MOONCAKE_GLOBAL_SEGMENT_SIZE"] = "16mb"
        c = mcc.MooncakeConfig.load_from_env()
        self.assertEqual((c.master_server_address, c.protocol, c.global_segment_size),
                         ("10.0.0.1:50051", "rdma", 16 * MIB))
        self.assertEqual(c.metadata_server, "P2PHANDSHAKE")


class EngineSurfaceTest(unittest.TestCase):
    def test_constants_and_types(self):
        for flag in ("SUPPORT_HIP", "SUPPORT_EFA", "SUPPORT_MNNVL", "SUPPORT_MUSA",
                     "SUPPORT_INTRA_NVLINK", "SUPPORT_CXL"):
            self.assertIs(getattr(mc_engine, flag), False, flag)
        # SUPPORT_CUDA: whether the library found a usable GPU (tests/test_cuda.py).
        self.assertIs(mc_engine.SUPPORT_CUDA, mooncake._cuda.supported())
        self.assertIs(TransferEngine.TransferOpcode, TransferOpcode)
        self.assertEqual((int(mc_engine.Read), int(mc_engine.Write)), (0, 1))
        self.assertEqual(TransferOpcode.WRITE, TransferOpcode.Write)
        n = TransferNotify(name="n", msg="m")
        self.assertEqual((n.name, n.msg), ("n", "m"))
        self.assertEqual(TransferNotify().name, "")

    def test_unsupported_hardware_answers(self):
        e = TransferEngine()
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        try:
            self.assertIsNone(e.get_engine())
            if not mc_engine.SUPPORT_CUDA:
                self.assertEqual(e.transfer_write_on_cuda("x", 0, 0, 1, stream_ptr=0, transport_hint="rdma"), -1)
                self.assertEqual(e.batch_transfer_read_on_cuda("x", [0], [0], [1]), -1)
            self.assertEqual(e.warmup_efa_segment(segment_name="x"), -1)
        finally:
            logging.getLogger("mooncake").setLevel(logging.NOTSET)

    def test_notify_and_hints(self):
        a, b = TransferEngine(), TransferEngine()
        self.assertEqual(a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0)
        self.assertEqual(b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0)
        try:
            self.assertIsNotNone(a.get_engine())
            self.assertNotEqual(a.get_engine_ptr(), 0)
            src = (ctypes.c_char * 64)()
            ctypes.memmove(src, b"x" * 64, 64)
            self.assertEqual(a.register_memory(buffer_addr=ctypes.addressof(src), capacity=64), 0)
            dst = b.allocate_managed_buffer(64)
            peer = b.get_session_id()
            self.assertEqual(a.transfer_sync_write(peer, ctypes.addressof(src), dst, 64, transport_hint="tcp"), 0)
            self.assertEqual(a.transfer_sync(peer, ctypes.addressof(src), dst, 64, TransferOpcode.Write,
                                             notify=TransferNotify("done", "64 bytes"), transport_hint=""), 0)
            self.assertEqual(a.batch_transfer_sync(peer, [ctypes.addressof(src)], [dst], [64], TransferOpcode.Read,
                                                   notify=TransferNotify("read", "")), 0)
            self.assertEqual(a.send_probe(peer_server_name=peer), 0)
            got = []
            for _ in range(200):
                got += b.get_notifies()
                if len(got) >= 2:
                    break
                import time
                time.sleep(0.01)
            self.assertEqual([(n.name, n.msg) for n in got], [("done", "64 bytes"), ("read", "")])
            self.assertEqual(got[0].from_session, a.get_session_id())
            self.assertEqual(b.read_bytes_from_buffer(dst, 64), b"x" * 64)
        finally:
            a.close()
            b.close()


class StoreApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.master, cls.addr = start_master("--lease-ttl", "100ms")
        cls.store = MooncakeDistributedStore()
        rc = cls.store.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                              "global_segment_size": "64MB", "local_buffer_size": "16 MB", "protocol": "TCP",
                              "rdma_devices": "", "master_server_addr": cls.addr})
        if rc != 0:
            cls.master.stop()
            raise RuntimeError("setup(dict) failed: %d" % rc)

    @classmethod
    def tearDownClass(cls):
        cls.store.close()
        cls.master.stop(signal_first=True)
        logging.getLogger("mooncake").setLevel(logging.NOTSET)

    def test_hostname_has_a_port(self):
        host, port = self.store.get_hostname().rsplit(":", 1)
        self.assertEqual(host, "127.0.0.1")
        self.assertTrue(12300 <= int(port) <= 14300, port)
        self.assertEqual(MooncakeDistributedStore().get_hostname(), "")

    def test_setup_keywords(self):
        s = MooncakeDistributedStore()
        logging.getLogger("mooncake").setLevel(logging.WARNING)
        try:
            with self.assertLogs("mooncake", level="WARNING") as cm:
                rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MIB, "tcp", "", self.addr,
                             enable_ssd_offload=True, ssd_offload_path="/tmp/x", tenant_id="t1",
                             enable_client_http_server=True, client_http_port=9301)
            self.assertEqual(rc, 0)
            text = "\n".join(cm.output)
            self.assertIn("SSD offload", text)
            self.assertNotIn("tenant", text)  # tenant_id names the tenant; a master without tenants ignores it
            self.assertEqual(s.config.tenant_id, "t1")
            self.assertEqual(s.health_check(), 0)
            with self.assertLogs("mooncake", level="ERROR"):
                self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MIB, "tcp", "", self.addr),
                                 ErrorCode.INVALID_PARAMS)  # already set up
        finally:
            logging.getLogger("mooncake").setLevel(logging.CRITICAL)
            s.close()
        self.assertEqual(s.health_check(), 1)
        cfg = mcc.MooncakeConfig("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MIB, "tcp", "", self.addr)
        self.assertEqual(s.setup(cfg), 0)
        s.close()
        self.assertEqual(s.setup(config={"local_hostname": "127.0.0.1"}), ErrorCode.INVALID_PARAMS)
        self.assertEqual(s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                                  "global_segment_size": "50%", "master_server_addr": self.addr}),
                         ErrorCode.INVALID_PARAMS)

    def test_put_keeps_upsert_replaces(self):
        s = self.store
        self.assertEqual(s.put("api/u", b"one"), 0)
        self.assertEqual(s.put("api/u", b"two"), 0)
        self.assertEqual(s.get("api/u"), b"one")
        # A get leases the object; an upsert right after it still replaces it (no lease check, as Mooncake's).
        self.assertEqual(s.upsert("api/u", b"three"), 0)
        self.assertEqual(s.get("api/u"), b"three")
        self.assertEqual(s.upsert_parts("api/u", b"fo", bytearray(b"ur")), 0)
        self.assertEqual(s.get("api/u"), b"four")
        wait_for(lambda: s.upsert_batch(["api/u", "api/u2"], [b"5", b"6"]) == 0, timeout=10)
        self.assertEqual(s.get_batch(["api/u", "api/u2"]), [b"5", b"6"])
        buf = (ctypes.c_char * 8)()
        ctypes.memmove(buf, b"ABCDEFGH", 8)
        p = ctypes.addressof(buf)
        self.assertEqual(s.register_buffer(p, 8), 0)
        wait_for(lambda: s.upsert_from("api/u", p, 4) == 0, timeout=10)
        self.assertEqual(s.get("api/u"), b"ABCD")
        wait_for(lambda: s.batch_upsert_from(["api/u", "api/u2"], [p, p + 4], [4, 4]) == [0, 0], timeout=10)
        self.assertEqual(s.get("api/u2"), b"EFGH")
        self.assertEqual(s.unregister_buffer(p), 0)
        self.assertEqual(s.batch_remove(["api/u", "api/u2", "api/none"], force=True),
                         [0, 0, ErrorCode.OBJECT_NOT_FOUND])

    def test_replicate_config_checks(self):
        s = self.store
        c = ReplicateConfig()
        c.soft_pin_ttl_ms = 1000
        self.assertEqual(s.put("api/sp", b"v", c), ErrorCode.INVALID_PARAMS)  # TTL needs ENABLE
        c.soft_pin_action = SoftPinAction.ENABLE
        self.assertEqual(s.put("api/sp", b"v", c), 0)
        c = ReplicateConfig()
        c.replica_num = 0
        self.assertEqual(s.upsert("api/sp", b"v", c), ErrorCode.INVALID_PARAMS)
        c = ReplicateConfig()
        c.with_hard_pin = True
        c.data_type = ObjectDataType.KVCACHE  # accepted, ignored with a warning
        c.preferred_segment = self.store.get_hostname()
        self.assertEqual(s.put("api/hp", b"pinned", c), 0)
        self.assertEqual(s.get("api/hp"), b"pinned")
        with self.assertRaises(TypeError):
            s.put("api/x", b"v", config="nope")
        with self.assertRaises(TypeError):
            s.put(key_typo="api/x", value=b"v")
        s.batch_remove(["api/sp", "api/hp"], force=True)

    def test_replica_desc_and_buffers(self):
        s = self.store
        self.assertEqual(s.put("api/rd", b"x" * 100), 0)
        reps = s.get_replica_desc("api/rd")
        self.assertEqual(len(reps), 1)
        self.assertTrue(reps[0].is_memory_replica())
        self.assertEqual(reps[0].status, ReplicaStatus.COMPLETE)
        self.assertEqual(reps[0].get_memory_descriptor().buffer_descriptor.size, 100)
        self.assertEqual(s.get_replica_desc("api/none"), [])
        self.assertEqual(list(s.batch_get_replica_desc(["api/rd", "api/none"])), ["api/rd"])
        got = s.batch_get_buffer(["api/rd", "api/none"])
        self.assertEqual(bytes(got[0]), b"x" * 100)
        self.assertIsNone(got[1])
        self.assertIsNone(s.get_buffer("api/none"))
        s.remove("api/rd", force=True)

    def test_get_into_ranges_and_metadata(self):
        s = self.store
        meta, data = b"META", b"0123456789"
        mb, db = ctypes.create_string_buffer(meta, 4), ctypes.create_string_buffer(data, 10)
        self.assertEqual(s.put_from_with_metadata("api/m", ctypes.addressof(db), ctypes.addressof(mb), 10, 4), 0)
        self.assertEqual(s.get("api/m"), meta + data)
        out = (ctypes.c_char * 16)()
        p = ctypes.addressof(out)
        self.assertEqual(s.register_buffer(p, 16), 0)
        r = s.get_into_ranges([p], [["api/m", "api/none"]], [[[0, 8], [0]]], [[[4, 10], [0]]], [[[3, 4], [1]]])
        self.assertEqual(r[0][0], [3, 4])
        self.assertLess(r[0][1][0], 0)
        self.assertEqual(out.raw[0:3], b"012")
        self.assertEqual(out.raw[8:12], b"6789")
        self.assertLess(s.get_into_ranges([p], [["api/m"]], [[[14]]], [[[0]]], [[[4]]])[0][0][0], 0)
        self.assertEqual(s.unregister_buffer(p), 0)
        s.remove("api/m", force=True)

    def test_buffer_pool(self):
        s = self.store
        pool = mooncake.BufferPool(s, max_bytes=256 * 1024, min_size_class=64 * 1024)
        with pool.acquire(100) as lease:
            self.assertGreaterEqual(lease.size, 100)
            lease.buffer[:5] = b"hello"
            self.assertEqual(s.put_from("api/bp", lease.ptr, 5), 0)
        lease2 = pool.acquire(64 * 1024)
        self.assertEqual(s.get_into("api/bp", lease2.ptr, lease2.size), 5)
        self.assertEqual(bytes(lease2.buffer[:5]), b"hello")
        lease2.release()
        big = pool.acquire(256 * 1024, block=False)
        with self.assertRaisesRegex(RuntimeError, "exhausted"):
            pool.acquire(256 * 1024, block=False)
        with self.assertRaisesRegex(RuntimeError, "exhausted"):
            pool.acquire(256 * 1024, timeout=0.05)
        view = big.buffer
        with self.assertRaisesRegex(RuntimeError, "exported views"):
            big.release()
        with self.assertRaisesRegex(RuntimeError, "active leases"):
            pool.close()
        del view
        big.release()
        with self.assertRaisesRegex(RuntimeError, "alignment"):
            mooncake.BufferPool(s, alignment=12345)
        self.assertEqual(len(pool.acquire(0, block=False).buffer), 0)  # released when collected
        pool.close()
        s.remove("api/bp", force=True)

    def test_unsupported_answer_with_codes(self):
        s = self.store
        NS = ErrorCode.NOT_SUPPORTED
        self.assertEqual(s.setup_dummy(MIB, MIB, "127.0.0.1:50052"), ErrorCode.INVALID_PARAMS)  # already set up
        self.assertLess(MooncakeDistributedStore().setup_dummy(MIB, MIB, "127.0.0.1:1"), 0)  # no real client
        self.assertEqual(s.get_offload_rpc_read_count(), 0)
        self.assertIsNone(s.get_tensor("k"))  # missing
        self.assertEqual(s.put_tensor("k", None), ErrorCode.INVALID_PARAMS)  # not a tensor
        self.assertEqual(s.batch_put_tensor(["a", "b"], [None, None]), [ErrorCode.INVALID_PARAMS] * 2)
        self.assertEqual(s.batch_get_tensor(keys=["a"]), [None])

    def test_zero_local_buffer(self):
        s = MooncakeDistributedStore()
        self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", self.addr), 0)
        try:
            self.assertNotEqual(s.put("api/zero", b"v"), 0)
            self.assertEqual(s.is_exist("api/zero"), 0)
            buf = ctypes.create_string_buffer(b"v", 1)
            self.assertEqual(s.register_buffer(ctypes.addressof(buf), 1), 0)
            self.assertEqual(s.put_from("api/zero", ctypes.addressof(buf), 1), 0)  # registered memory works
            self.assertEqual(s.unregister_buffer(ctypes.addressof(buf)), 0)
            self.assertEqual(s.remove("api/zero", force=True), 0)
        finally:
            s.close()


class HttpMetadataServerTest(unittest.TestCase):
    def test_engines_publish_and_find_each_other(self):
        import urllib.error
        import urllib.request
        from mooncake.http_metadata_server import KVBootstrapServer, KVPoll
        srv = KVBootstrapServer(port=0, host="127.0.0.1")
        self.assertEqual(srv.poll(), KVPoll.Failed)
        srv.run()
        url = "http://127.0.0.1:%d/metadata" % srv.port
        try:
            self.assertEqual(srv.poll(), KVPoll.Success)
            for method, key, code in (("GET", "", 400), ("GET", "nope", 404), ("DELETE", "nope", 404),
                                      ("POST", "k", 405)):
                req = urllib.request.Request(url + "?key=" + key, method=method, data=b"" if method == "POST" else None)
                with self.assertRaises(urllib.error.HTTPError) as cm:
                    urllib.request.urlopen(req, timeout=10)
                self.assertEqual(cm.exception.code, code, (method, key))
            a, b = TransferEngine(), TransferEngine()
            self.assertEqual(a.initialize("127.0.0.1", url, "tcp", ""), 0)
            self.assertEqual(b.initialize("127.0.0.1", url, "tcp", ""), 0)
            try:
                self.assertTrue(any(k.startswith("mooncake/") for k in srv.store), list(srv.store))
                dst = b.allocate_managed_buffer(32)
                self.assertNotEqual(a.get_first_buffer_address(b.get_session_id()), 0)
                src = (ctypes.c_char * 32)()
                ctypes.memmove(src, b"m" * 32, 32)
                self.assertEqual(a.register_memory(ctypes.addressof(src), 32), 0)
                self.assertEqual(a.transfer_sync_write(b.get_session_id(), ctypes.addressof(src), dst, 32), 0)
                self.assertEqual(b.read_bytes_from_buffer(dst, 32), b"m" * 32)
            finally:
                a.close()
                b.close()
        finally:
            srv.close()
        self.assertEqual(srv.poll(), KVPoll.Failed)


if __name__ == "__main__":
    unittest.main()
