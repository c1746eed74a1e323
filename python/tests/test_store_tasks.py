"""Replica clear and copy/move tasks: batch_replica_clear, create_copy_task, create_move_task, query_task.

A master with a 100 ms lease, a storage node, and clients that contribute their own segment (so that
a key can live on either), as in Mooncake's test_batch_replica_clear.py.
"""

import logging
import unittest

from mooncake.store import (UUID, ErrorCode, MooncakeDistributedStore, QueryTaskResponse, ReplicateConfig, TaskStatus,
                            TaskType)

from _support import free_port, start_master, start_storage_node, wait_for

MIB = 1 << 20


def _setup(addr, segment="32MB"):
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", segment, "8MB", "tcp", "", addr)
    if rc != 0:
        raise RuntimeError("setup failed: %d" % rc)
    return s


class StoreTasksTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.master, cls.addr = start_master("--lease-ttl", "100ms")
        cls.node = start_storage_node(cls.addr, "64MiB")
        cls.store = _setup(cls.addr)
        cls.other = _setup(cls.addr, 0)
        cls.me = cls.store.get_hostname()
        # The node's segment name: the replica of a two-replica put that is not ours.
        cfg = ReplicateConfig()
        cfg.replica_num = 2
        assert cls.store.put("tasks/probe", b"p", config=cfg) == 0
        eps = {r.get_memory_descriptor().buffer_descriptor.transport_endpoint
               for r in cls.store.get_replica_desc("tasks/probe")}
        eps.discard(cls.me)
        assert len(eps) == 1, eps
        cls.node_seg = eps.pop()

    @classmethod
    def tearDownClass(cls):
        cls.other.close()
        cls.store.close()
        cls.node.stop(signal_first=True)
        cls.master.stop(signal_first=True)
        logging.getLogger("mooncake").setLevel(logging.NOTSET)

    def _on(self, key, segments):
        cfg = ReplicateConfig()
        cfg.replica_num = len(segments)
        cfg.preferred_segments = list(segments)
        return cfg

    def _segments(self, key):
        return sorted(r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                      for r in self.store.get_replica_desc(key))

    def _wait_task(self, tid):
        def done():
            resp, rc = self.store.query_task(tid)
            self.assertEqual(rc, 0)
            return resp if resp.status in (TaskStatus.SUCCESS, TaskStatus.FAILED) else None
        return wait_for(done, timeout=30)

    def test_replica_clear(self):
        s = self.store
        self.assertEqual(s.batch_replica_clear([]), [])
        self.assertEqual(s.batch_replica_clear(["tasks/none1", "tasks/none2"]), [])
        self.assertEqual(s.put("tasks/rc", b"replicated", config=self._on("tasks/rc", [self.me, self.node_seg])), 0)
        self.assertEqual(s.put("tasks/keep", b"kept"), 0)
        self.assertEqual(s.batch_replica_clear(["tasks/rc"]), [])  # just written: in use
        # A segment without a replica of the key clears nothing.
        wait_for(lambda: s.get_size("tasks/rc") > 0 and s.batch_replica_clear(["tasks/rc"], "127.0.0.1:1") == [] and
                 s.batch_replica_clear(["tasks/rc"], segment_name=self.me) == ["tasks/rc"], timeout=10)
        self.assertEqual(self._segments("tasks/rc"), [self.node_seg])
        self.assertEqual(self.other.get("tasks/rc"), b"replicated")  # the node's replica serves it
        # Only the client that put a key may clear it.
        wait_for(lambda: self.other.batch_replica_clear(["tasks/rc"]) == [] and
                 s.batch_replica_clear(["tasks/rc", "tasks/none1"], segment_name="") == ["tasks/rc"], timeout=10)
        self.assertEqual(s.get("tasks/rc"), b"")
        self.assertEqual(s.is_exist("tasks/rc"), 0)
        self.assertEqual(s.get("tasks/keep"), b"kept")
        s.remove("tasks/keep", force=True)
        self.assertEqual(MooncakeDistributedStore().batch_replica_clear(["x"]), [])  # not set up

    def test_copy_and_move(self):
        s = self.store
        value = bytes(range(256)) * 1024
        self.assertEqual(s.put("tasks/copy", value, config=self._on("tasks/copy", [self.me])), 0)
        tid, rc = s.create_copy_task("tasks/copy", [self.node_seg])
        self.assertEqual(rc, 0)
        self.assertIsInstance(tid, tuple)
        self.assertNotEqual(tuple(tid), (0, 0))
        resp, rc = s.query_task(tid)
        self.assertEqual(rc, 0)
        self.assertIsInstance(resp, QueryTaskResponse)
        self.assertEqual(resp.type, TaskType.REPLICA_COPY)
        self.assertEqual(tuple(resp.id), tuple(tid))
        self.assertGreater(resp.created_at_ms_epoch, 0)
        resp = self._wait_task(tid)
        self.assertEqual(resp.status, TaskStatus.SUCCESS, resp.message)
        self.assertGreaterEqual(resp.last_updated_at_ms_epoch, resp.created_at_ms_epoch)
        self.assertEqual(self._segments("tasks/copy"), sorted([self.me, self.node_seg]))
        self.assertEqual(self.other.get("tasks/copy"), value)

        self.assertEqual(s.put("tasks/move", b"moving", config=self._on("tasks/move", [self.node_seg])), 0)
        tid, rc = s.create_move_task("tasks/move", self.node_seg, self.me)
        self.assertEqual(rc, 0)
        resp = self._wait_task(tid)
        self.assertEqual((resp.type, resp.status), (TaskType.REPLICA_MOVE, TaskStatus.SUCCESS), resp.message)
        self.assertEqual(self._segments("tasks/move"), [self.me])
        self.assertEqual(self.other.get("tasks/move"), b"moving")
        for k in ("tasks/copy", "tasks/move"):
            s.remove(k, force=True)

    def test_task_failures(self):
        s = self.store
        self.assertEqual(s.create_copy_task("tasks/missing", [self.node_seg]), (UUID(0, 0), ErrorCode.OBJECT_NOT_FOUND))
        self.assertEqual(s.put("tasks/f", b"v", config=self._on("tasks/f", [self.me])), 0)
        self.assertEqual(s.create_copy_task("tasks/f", []), (UUID(0, 0), ErrorCode.INVALID_PARAMS))
        self.assertEqual(s.create_copy_task("tasks/f", ["127.0.0.1:1"]), (UUID(0, 0), ErrorCode.INVALID_PARAMS))
        self.assertEqual(s.create_move_task("tasks/f", self.me, self.me), (UUID(0, 0), ErrorCode.INVALID_PARAMS))
        self.assertEqual(s.create_move_task("tasks/f", self.node_seg, self.me)[1], ErrorCode.INVALID_PARAMS)  # no replica there
        self.assertEqual(s.query_task((1, 2)), (None, -1400))
        self.assertEqual(s.query_task(UUID(3, 4)), (None, -1400))
        with self.assertRaises(TypeError):
            s.query_task("not a uuid")
        with self.assertRaises(TypeError):
            s.query_task((-1, 0))
        unset = MooncakeDistributedStore()
        self.assertEqual(unset.create_copy_task("k", ["x"])[1], ErrorCode.INVALID_PARAMS)
        self.assertEqual(unset.query_task((1, 2)), (None, ErrorCode.INVALID_PARAMS))
        s.remove("tasks/f", force=True)

    def test_taken_port_shares_the_name(self):
        # Mooncake's test_batch_replica_clear sets up a second client on a host:port another
        # client of the process still holds. Mooncake's engine never binds that port, and both
        # segments go under that name: ours takes a free port for the engine, and the segment
        # and get_hostname() keep local_hostname, as there.
        want = "127.0.0.1:%d" % free_port()
        a, b = MooncakeDistributedStore(), MooncakeDistributedStore()
        try:
            self.assertEqual(a.setup(want, "P2PHANDSHAKE", "4MB", "4MB", "tcp", "", self.addr), 0)
            self.assertEqual(b.setup(want, "P2PHANDSHAKE", "4MB", "4MB", "tcp", "", self.addr), 0)
            self.assertEqual(a.get_hostname(), want)
            self.assertEqual(b.get_hostname(), want)
            def endpoints(key):
                return {r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                        for r in b.get_replica_desc(key)}

            # A preferred name means the caller's own segment under it: b's, whose engine
            # (its transport endpoint) has another port.
            cfg = ReplicateConfig()
            cfg.replica_num = 2
            cfg.preferred_segments = [want, self.node_seg]
            self.assertEqual(b.put("tasks/port", b"v", config=cfg), 0)
            eps = endpoints("tasks/port")
            self.assertEqual(len(eps), 2, eps)
            self.assertIn(self.node_seg, eps)
            self.assertNotIn(want, eps)  # not a's segment
            self.assertEqual(a.get("tasks/port"), b"v")
            cfg = ReplicateConfig()
            cfg.preferred_segment = want
            self.assertEqual(a.put("tasks/port-a", b"w", config=cfg), 0)
            self.assertEqual(endpoints("tasks/port-a"), {want})  # a's own
            # Clearing the name clears the copy under it, whichever client holds it.
            wait_for(lambda: b.batch_replica_clear(["tasks/port"], want) == ["tasks/port"], timeout=10)
            self.assertEqual(endpoints("tasks/port"), {self.node_seg})
            self.assertEqual(a.get("tasks/port"), b"v")
            self.assertEqual(b.remove("tasks/port", force=True), 0)
            self.assertEqual(a.remove("tasks/port-a", force=True), 0)
        finally:
            a.close()
            b.close()


if __name__ == "__main__":
    unittest.main()
