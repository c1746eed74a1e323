"""TransferEngine end to end: this process and a peer process (engine_peer.py)."""

import hashlib
import json
import logging
import time
import unittest

import numpy as np

from _support import python_child, wait_for
from mooncake.engine import TransferEngine, TransferOpcode

PEER_SIZE = 8 << 20
KIB = 1024


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def rand(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


class TransferEngineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)  # failures below are on purpose
        cls.peer = python_child("engine_peer.py", PEER_SIZE)
        try:
            info = json.loads(cls.peer.readline(60))
        except Exception:
            cls.peer.stop()
            raise
        if "error" in info:
            cls.peer.stop()
            raise RuntimeError("peer: %s" % info["error"])
        cls.session, cls.raddr, cls.rlen = info["session"], info["addr"], info["len"]
        cls.eng = TransferEngine()
        assert cls.eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        cls.local = np.zeros(4 << 20, dtype=np.uint8)
        cls.laddr = cls.local.ctypes.data
        assert cls.eng.register_memory(cls.laddr, cls.local.nbytes) == 0

    @classmethod
    def tearDownClass(cls):
        cls.eng.unregister_memory(cls.laddr)
        cls.eng.close()
        rc = cls.peer.stop()
        assert rc == 0, "peer exited with %s" % rc

    def remote_sha(self, off, n):
        return self.peer.call({"op": "sha", "off": off, "len": n})["sha"]

    def test_session_and_port(self):
        port = self.eng.get_rpc_port()
        self.assertGreater(port, 0)
        self.assertEqual(self.eng.get_session_id(), "127.0.0.1:%d" % port)
        self.assertTrue(self.session.startswith("127.0.0.1:"))

    def test_sync_write_then_read(self):
        self.local[:256 * KIB] = rand(256 * KIB, 1)
        self.assertEqual(self.eng.transfer_sync_write(self.session, self.laddr, self.raddr + 4096, 256 * KIB), 0)
        self.assertEqual(self.remote_sha(4096, 256 * KIB), sha(self.local[:256 * KIB]))
        self.local[1 << 20:(1 << 20) + 256 * KIB] = 0
        self.assertEqual(self.eng.transfer_sync_read(self.session, self.laddr + (1 << 20), self.raddr + 4096,
                                                     256 * KIB), 0)
        np.testing.assert_array_equal(self.local[1 << 20:(1 << 20) + 256 * KIB], self.local[:256 * KIB])

    def test_generic_opcode_calls(self):
        self.local[:1000] = rand(1000, 9)
        self.assertEqual(self.eng.transfer_sync(self.session, self.laddr, self.raddr + 77, 1000,
                                                TransferOpcode.Write), 0)
        self.assertEqual(self.remote_sha(77, 1000), sha(self.local[:1000]))

    def test_batch_sync_write_and_read(self):
        # 8 blocks of mixed sizes to scattered remote offsets.
        sizes = [1, 100, 4 * KIB, 64 * KIB, 65 * KIB, 300 * KIB, 1 << 20, 7]
        locs, rems, off, roff = [], [], 0, 2 << 20
        self.local[:sum(sizes)] = rand(sum(sizes), 2)
        for n in sizes:
            locs.append(self.laddr + off)
            rems.append(self.raddr + roff)
            off += n
            roff += n + 13
        self.assertEqual(self.eng.batch_transfer_sync_write(self.session, locs, rems, sizes), 0)
        off, roff = 0, 2 << 20
        for n in sizes:
            self.assertEqual(self.remote_sha(roff, n), sha(self.local[off:off + n]), "block of %d" % n)
            off += n
            roff += n + 13
        # Read them back into the upper half, reversed order of blocks.
        base = 2 << 20
        dsts, o = [], base
        for n in sizes:
            dsts.append(self.laddr + o)
            o += n
        self.local[base:o] = 0
        self.assertEqual(self.eng.batch_transfer_sync_read(self.session, dsts, rems, sizes), 0)
        np.testing.assert_array_equal(self.local[base:o], self.local[:sum(sizes)])

    def test_batch_async_write_and_read(self):
        n, k = 128 * KIB, 6
        self.local[:n * k] = rand(n * k, 3)
        locs = [self.laddr + i * n for i in range(k)]
        rems = [self.raddr + (5 << 20) + i * n for i in range(k)]
        b1 = self.eng.batch_transfer_async_write(self.session, locs[:3], rems[:3], [n] * 3)
        b2 = self.eng.batch_transfer_async_write(self.session, locs[3:], rems[3:], [n] * 3)
        self.assertGreater(b1, 0)
        self.assertGreater(b2, 0)
        self.assertNotEqual(b1, b2)
        self.assertEqual(self.eng.get_batch_transfer_status([b1, b2]), 0)
        self.assertEqual(self.remote_sha(5 << 20, n * k), sha(self.local[:n * k]))
        # Waited batches are freed: waiting again fails.
        self.assertEqual(self.eng.get_batch_transfer_status([b1]), -1)
        dst = [self.laddr + (2 << 20) + i * n for i in range(k)]
        self.local[2 << 20:(2 << 20) + n * k] = 0
        b3 = self.eng.batch_transfer_async_read(self.session, dst, rems, [n] * k)
        self.assertGreater(b3, 0)
        self.assertEqual(self.eng.get_batch_transfer_status([b3]), 0)
        np.testing.assert_array_equal(self.local[2 << 20:(2 << 20) + n * k], self.local[:n * k])

    def test_submit_and_check_status(self):
        n = 512 * KIB
        self.local[:n] = rand(n, 4)
        bid = self.eng.transfer_submit_write(self.session, self.laddr, self.raddr + (3 << 20), n)
        self.assertGreater(bid, 0)
        seen = []

        def done():
            rc = self.eng.transfer_check_status(bid)
            seen.append(rc)
            return rc != 0
        wait_for(done, timeout=30)
        self.assertEqual(seen[-1], 1, "status sequence %r" % seen)
        self.assertTrue(all(x in (0, 1) for x in seen), seen)
        self.assertEqual(self.remote_sha(3 << 20, n), sha(self.local[:n]))
        # Final states free the batch; an unknown id reads as failed.
        self.assertEqual(self.eng.transfer_check_status(bid), -1)
        self.assertEqual(self.eng.transfer_check_status(987654321), -1)

    def test_unknown_peer_fails(self):
        dead = "127.0.0.1:1"
        self.assertEqual(self.eng.transfer_sync_write(dead, self.laddr, self.raddr, 100), -1)
        self.assertEqual(self.eng.batch_transfer_sync_read(dead, [self.laddr], [self.raddr], [100]), -1)
        self.assertEqual(self.eng.batch_transfer_async_write(dead, [self.laddr], [self.raddr], [100]), 0)
        self.assertEqual(self.eng.transfer_submit_write(dead, self.laddr, self.raddr, 100), 0)
        self.assertEqual(self.eng.send_probe(dead), -1)
        self.assertEqual(self.eng.get_first_buffer_address(dead), 0)
        self.assertEqual(self.eng.transfer_sync_write("not a session", self.laddr, self.raddr, 100), -1)
        self.assertEqual(self.eng.transfer_sync_write("", self.laddr, self.raddr, 100), -1)

    def test_remote_out_of_bounds_fails_and_peer_survives(self):
        cases = [
            (self.raddr + self.rlen - 10, 100),  # runs past the end
            (self.raddr - 4096, 100),  # before the buffer
            (self.raddr + self.rlen, 1),  # just after
            (12345, 8),  # nowhere
        ]
        for raddr, n in cases:
            with self.subTest(raddr=raddr, n=n):
                self.assertEqual(self.eng.transfer_sync_write(self.session, self.laddr, raddr, n), -1)
                self.assertEqual(self.eng.transfer_sync_read(self.session, self.laddr, raddr, n), -1)
        bid = self.eng.batch_transfer_async_write(self.session, [self.laddr], [self.raddr + self.rlen - 1], [2])
        if bid:  # rejected either at submit (0) or when it completes (-1)
            self.assertEqual(self.eng.get_batch_transfer_status([bid]), -1)
        bid = self.eng.transfer_submit_write(self.session, self.laddr, self.raddr + self.rlen - 1, 2)
        if bid:
            self.assertEqual(wait_for(lambda: self.eng.transfer_check_status(bid) or None, timeout=30), -1)
        # The peer still serves.
        self.local[:64] = rand(64, 5)
        self.assertEqual(self.eng.transfer_sync_write(self.session, self.laddr, self.raddr, 64), 0)
        self.assertEqual(self.remote_sha(0, 64), sha(self.local[:64]))

    def test_bad_local_address_is_an_error_not_a_crash(self):
        other = np.zeros(4096, dtype=np.uint8)
        for laddr, n in [(other.ctypes.data, 16), (0, 16), (self.laddr + self.local.nbytes - 8, 16), (1, 1)]:
            with self.subTest(laddr=laddr):
                self.assertEqual(self.eng.transfer_sync_write(self.session, laddr, self.raddr, n), -1)
                self.assertEqual(self.eng.transfer_sync_read(self.session, laddr, self.raddr, n), -1)
        self.assertEqual(self.eng.transfer_sync_write(self.session, self.laddr, self.raddr, 0), -1)
        self.assertEqual(self.eng.batch_transfer_sync_write(self.session, [self.laddr], [], [1]), -1)
        self.assertEqual(self.eng.batch_transfer_sync_write(self.session, [], [], []), -1)
        self.assertEqual(self.eng.batch_transfer_async_read(self.session, [self.laddr, 1], [self.raddr] * 2, [8, 8]), 0)
        self.assertEqual(self.eng.transfer_sync(self.session, self.laddr, self.raddr, 8, 7), -1)
        self.assertEqual(self.eng.write_bytes_to_buffer(other.ctypes.data, b"abc", 3), -1)
        self.assertEqual(self.eng.read_bytes_from_buffer(other.ctypes.data, 3), b"")
        self.assertEqual(self.eng.get_batch_transfer_status([424242]), -1)

    def test_probe_and_first_buffer(self):
        self.assertEqual(self.eng.send_probe(self.session), 0)
        self.assertEqual(self.eng.get_first_buffer_address(self.session), self.raddr)

    def test_register_unregister(self):
        arrs = [np.zeros(64 * KIB, dtype=np.float32) for _ in range(3)]
        addrs = [a.ctypes.data for a in arrs]
        sizes = [a.nbytes for a in arrs]
        self.assertEqual(self.eng.batch_register_memory(addrs, sizes), 0)
        self.assertEqual(self.eng.register_memory(addrs[0], sizes[0]), -1)  # twice
        self.assertEqual(self.eng.register_memory(addrs[0] + 8, 16), -1)  # overlapping
        arrs[1][:] = np.arange(64 * KIB, dtype=np.float32)
        self.assertEqual(self.eng.transfer_sync_write(self.session, addrs[1], self.raddr + (7 << 20), sizes[1]), 0)
        self.assertEqual(self.remote_sha(7 << 20, sizes[1]), sha(arrs[1].view(np.uint8)))
        self.assertEqual(self.eng.batch_unregister_memory(addrs), 0)
        self.assertEqual(self.eng.unregister_memory(addrs[0]), -1)
        self.assertEqual(self.eng.transfer_sync_write(self.session, addrs[1], self.raddr, 16), -1)
        self.assertEqual(self.eng.batch_register_memory(addrs, sizes[:1]), -1)
        self.assertEqual(self.eng.register_memory(0, 100), -1)
        self.assertEqual(self.eng.register_memory(addrs[2], 0), -1)

    def test_managed_buffer(self):
        n = 1 << 20
        addr = self.eng.allocate_managed_buffer(n)
        self.assertNotEqual(addr, 0)
        data = rand(n, 6).tobytes()
        self.assertEqual(self.eng.write_bytes_to_buffer(addr, data, n), 0)
        self.assertEqual(self.eng.read_bytes_from_buffer(addr, n), data)
        self.assertEqual(self.eng.transfer_sync_write(self.session, addr, self.raddr + (6 << 20), n), 0)
        self.assertEqual(self.remote_sha(6 << 20, n), hashlib.sha256(data).hexdigest())
        self.assertEqual(self.eng.write_bytes_to_buffer(addr + n - 2, b"abc", 3), -1)
        self.assertEqual(self.eng.free_managed_buffer(addr, n), 0)
        self.assertEqual(self.eng.free_managed_buffer(addr, n), -1)
        self.assertEqual(self.eng.read_bytes_from_buffer(addr, 1), b"")

    def test_two_way(self):
        # The peer writes into our registered memory.
        self.peer.call({"op": "fill", "off": 0, "len": 4096, "seed": 8})
        self.local[3 << 20:(3 << 20) + 4096] = 0
        rc = self.peer.call({"op": "write", "target": self.eng.get_session_id(), "addr": self.laddr + (3 << 20),
                             "off": 0, "len": 4096})["rc"]
        self.assertEqual(rc, 0)
        self.assertEqual(sha(self.local[3 << 20:(3 << 20) + 4096]), self.remote_sha(0, 4096))

    def test_concurrent_threads(self):
        # Four Python threads share the engine, each writing its own region (ctypes drops the GIL).
        import threading
        n, rounds = 64 * KIB, 20
        base = 4 << 20  # remote offset of the region used here
        self.local[:4 * n] = rand(4 * n, 10)
        errors = []

        def worker(i):
            for r in range(rounds):
                rc = self.eng.batch_transfer_sync_write(self.session, [self.laddr + i * n], [self.raddr + base + i * n],
                                                        [n])
                if rc != 0:
                    errors.append((i, r, rc))
                bid = self.eng.batch_transfer_async_read(self.session, [self.laddr + (2 << 20) + i * n],
                                                         [self.raddr + base + i * n], [n])
                if bid == 0 or self.eng.get_batch_transfer_status([bid]) != 0:
                    errors.append((i, r, "read"))

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        self.assertFalse(any(t.is_alive() for t in ts), "a worker hung")
        self.assertEqual(errors, [])
        self.assertEqual(self.remote_sha(base, 4 * n), sha(self.local[:4 * n]))
        np.testing.assert_array_equal(self.local[2 << 20:(2 << 20) + 4 * n], self.local[:4 * n])

    def test_notify(self):
        self.assertEqual(self.eng.send_notify(self.session, "kv_done", "req-1"), 0)
        got = wait_for(lambda: self.peer.call({"op": "notifies"})["notifies"], timeout=30)
        self.assertEqual(got, [[self.eng.get_session_id(), "kv_done", "req-1"]])


class LifecycleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)

    def test_calls_before_initialize(self):
        e = TransferEngine()
        self.assertEqual(e.get_rpc_port(), -1)
        self.assertEqual(e.register_memory(4096, 10), -1)
        self.assertEqual(e.transfer_sync_write("127.0.0.1:1", 1, 2, 3), -1)
        self.assertEqual(e.batch_transfer_async_write("127.0.0.1:1", [1], [2], [3]), 0)
        self.assertEqual(e.transfer_check_status(1), -1)
        self.assertEqual(e.allocate_managed_buffer(4096), 0)
        self.assertEqual(e.close(), 0)

    def test_bad_initialize(self):
        for args in [("127.0.0.1", "redis://127.0.0.1:6379", "tcp", ""),
                     ("127.0.0.1", "P2PHANDSHAKE", "carrier-pigeon", ""),
                     ("127.0.0.1:99999", "P2PHANDSHAKE", "tcp", ""),
                     ("bad host/name", "P2PHANDSHAKE", "tcp", "")]:
            with self.subTest(args=args):
                e = TransferEngine()
                self.assertEqual(e.initialize(*args), -1)
                self.assertEqual(e.get_rpc_port(), -1)

    def test_rdma_falls_back_and_close_twice(self):
        e = TransferEngine()
        self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "mlx5_0"), 0)
        self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), -1)  # already initialized
        self.assertGreater(e.get_rpc_port(), 0)
        self.assertEqual(e.close(), 0)
        self.assertEqual(e.close(), 0)
        self.assertEqual(e.get_rpc_port(), -1)

    def test_fixed_port(self):
        probe = TransferEngine()
        self.assertEqual(probe.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0)
        port = probe.get_rpc_port()
        probe.close()
        e = TransferEngine()
        rc = -1
        deadline = time.monotonic() + 10
        while rc != 0 and time.monotonic() < deadline:  # the port may linger briefly
            rc = e.initialize("127.0.0.1:%d" % port, "P2PHANDSHAKE", "tcp", "")
            if rc != 0:
                time.sleep(0.05)
        self.assertEqual(rc, 0)
        self.assertEqual(e.get_rpc_port(), port)
        # Same port again in a second engine fails cleanly.
        f = TransferEngine()
        self.assertEqual(f.initialize("127.0.0.1:%d" % port, "P2PHANDSHAKE", "tcp", ""), -1)
        e.close()


if __name__ == "__main__":
    unittest.main()
