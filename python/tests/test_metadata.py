"""Discovery through a metadata service: two engine processes find each other
through a real `mooncake metadata-server` process (Mooncake's HTTP metadata
contract) instead of the P2P handshake.

An etcd run of the same checks needs an etcd endpoint: set MOONCAKE_TEST_ETCD
to host:port (there is no etcd binary on the CI machine, so it is skipped
there; the Go tests of package transfer cover etcd with an embedded server).
"""

import hashlib
import json
import logging
import os
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from _support import free_port, python_child, start_metadata_server, wait_for
from mooncake.engine import TransferEngine

PEER_SIZE = 4 << 20
KIB = 1024


class _Discovery(object):
    """The checks; subclasses provide the metadata server (cls.metadata)."""

    @classmethod
    def start_peers(cls):
        cls.peers = []
        try:
            for _ in range(2):
                p = python_child("engine_peer.py", PEER_SIZE, "tcp", cls.metadata)
                cls.peers.append(p)
                info = json.loads(p.readline(60))
                if "error" in info:
                    raise RuntimeError("peer: %s" % info["error"])
                p.info = info
        except Exception:
            cls.stop_peers()
            raise
        cls.a, cls.b = cls.peers

    @classmethod
    def stop_peers(cls):
        codes = [p.stop() for p in cls.peers]
        cls.peers = []
        return codes

    def sha(self, peer, off, n):
        return peer.call({"op": "sha", "off": off, "len": n})["sha"]

    def test_sessions_are_host_and_port(self):
        for p in (self.a, self.b):
            self.assertEqual(p.info["session"], "127.0.0.1:%d" % p.info["rpc_port"])
        self.assertNotEqual(self.a.info["session"], self.b.info["session"])

    def test_first_buffer_address_through_discovery(self):
        self.assertEqual(self.a.call({"op": "first", "segment": self.b.info["session"]})["addr"], self.b.info["addr"])
        self.assertEqual(self.b.call({"op": "first", "segment": self.a.info["session"]})["addr"], self.a.info["addr"])
        # A name nobody published: 0, not a crash or a hang.
        self.assertEqual(self.a.call({"op": "first", "segment": "127.0.0.1:1"})["addr"], 0)

    def test_probe_through_discovery(self):
        self.assertEqual(self.a.call({"op": "probe", "target": self.b.info["session"]})["rc"], 0)
        self.assertEqual(self.b.call({"op": "probe", "target": self.a.info["session"]})["rc"], 0)
        self.assertEqual(self.a.call({"op": "probe", "target": "127.0.0.1:1"})["rc"], -1)

    def test_transfers_both_ways_by_segment_name(self):
        a, b = self.a, self.b
        for i, (src, dst) in enumerate(((a, b), (b, a))):
            n, off, roff = 300 * KIB + i, 4096 * (i + 1), 1 << 20
            src.call({"op": "fill", "off": off, "len": n, "seed": 40 + i})
            raddr = src.call({"op": "first", "segment": dst.info["session"]})["addr"]
            self.assertEqual(raddr, dst.info["addr"])
            rc = src.call({"op": "write", "target": dst.info["session"], "addr": raddr + roff, "off": off, "len": n})
            self.assertEqual(rc["rc"], 0)
            self.assertEqual(self.sha(dst, roff, n), self.sha(src, off, n))
            # Read it back into another place of the source.
            back = 2 << 20
            rc = src.call({"op": "read", "target": dst.info["session"], "addr": raddr + roff, "off": back, "len": n})
            self.assertEqual(rc["rc"], 0)
            self.assertEqual(self.sha(src, back, n), self.sha(src, off, n))
        # Past the end of the peer's buffer: refused by the peer, -1.
        rc = a.call({"op": "write", "target": b.info["session"], "addr": b.info["addr"] + PEER_SIZE - 10,
                     "off": 0, "len": 100})
        self.assertEqual(rc["rc"], -1)
        # To a segment nobody published: -1.
        rc = a.call({"op": "write", "target": "127.0.0.1:1", "addr": 4096, "off": 0, "len": 100})
        self.assertEqual(rc["rc"], -1)


class HTTPMetadataTest(_Discovery, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)  # failures below are on purpose
        cls.server, cls.metadata = start_metadata_server()
        try:
            cls.start_peers()
        except Exception:
            cls.server.stop(signal_first=True)
            raise

    @classmethod
    def tearDownClass(cls):
        codes = cls.stop_peers()
        cls.server.stop(signal_first=True)
        assert codes == [0, 0], "peers exited with %s" % codes

    def get_key(self, key):
        """The metadata server's value of key (bytes), or None on 404."""
        url = self.metadata + "?key=" + urllib.parse.quote(key, safe="")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def test_segments_are_published_on_the_server(self):
        for p in (self.a, self.b):
            desc = json.loads(self.get_key("mooncake/ram/" + p.info["session"]))
            self.assertEqual(desc["name"], p.info["session"])
            self.assertEqual([(x["addr"], x["length"]) for x in desc["buffers"]], [(p.info["addr"], PEER_SIZE)])

    def test_local_engine_publishes_and_withdraws(self):
        eng = TransferEngine()
        self.assertEqual(eng.initialize("127.0.0.1", self.metadata, "tcp", ""), 0)
        name = eng.get_session_id()
        try:
            buf = eng.allocate_managed_buffer(64 * KIB)
            self.assertNotEqual(buf, 0)
            self.assertEqual(eng.write_bytes_to_buffer(buf, b"discovered", 10), 0)
            self.assertEqual(json.loads(self.get_key("mooncake/ram/" + name))["buffers"][0]["addr"], buf)
            # A peer process reads our managed buffer by our name alone.
            self.assertEqual(self.a.call({"op": "first", "segment": name})["addr"], buf)
            self.assertEqual(self.a.call({"op": "read", "target": name, "addr": buf, "off": 0, "len": 10})["rc"], 0)
            self.a.call({"op": "fill", "off": 100, "len": 10, "seed": 7})
            self.assertEqual(self.a.call({"op": "write", "target": name, "addr": buf + 20, "off": 100, "len": 10})["rc"], 0)
            self.assertEqual(self.sha(self.a, 0, 10), hashlib.sha256(b"discovered").hexdigest())
            self.assertEqual(hashlib.sha256(eng.read_bytes_from_buffer(buf + 20, 10)).hexdigest(),
                             self.sha(self.a, 100, 10))
        finally:
            self.assertEqual(eng.close(), 0)
        wait_for(lambda: self.get_key("mooncake/ram/" + name) is None, timeout=10)

    def test_initialize_ext_adds_the_metadata_type(self):
        eng = TransferEngine()
        bare = self.metadata[len("http://"):]
        self.assertEqual(eng.initialize_ext("127.0.0.1", bare, "tcp", "", "http"), 0)
        try:
            self.assertIsNotNone(self.get_key("mooncake/ram/" + eng.get_session_id()))
            self.assertEqual(self.b.call({"op": "probe", "target": eng.get_session_id()})["rc"], 0)
        finally:
            eng.close()

    def test_unreachable_or_unsupported_metadata_server(self):
        for server in ("http://127.0.0.1:%d/metadata" % free_port(), "redis://127.0.0.1:6379",
                       "https://127.0.0.1/metadata"):
            eng = TransferEngine()
            start = time.monotonic()
            self.assertEqual(eng.initialize("127.0.0.1", server, "tcp", ""), -1, server)
            self.assertLess(time.monotonic() - start, 20, server)
            self.assertEqual(eng.get_rpc_port(), -1)
            self.assertEqual(eng.close(), 0)


@unittest.skipUnless(os.environ.get("MOONCAKE_TEST_ETCD"), "set MOONCAKE_TEST_ETCD=host:port to run against etcd")
class EtcdMetadataTest(_Discovery, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.metadata = "etcd://" + os.environ["MOONCAKE_TEST_ETCD"]
        cls.start_peers()

    @classmethod
    def tearDownClass(cls):
        codes = cls.stop_peers()
        assert codes == [0, 0], "peers exited with %s" % codes


if __name__ == "__main__":
    unittest.main()
