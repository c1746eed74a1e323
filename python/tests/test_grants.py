"""Data-path grants from Python: on a master started with --grant-key-file, a store whose
MOONCAKE_GRANT_KEY_FILE names the master's key mounts its global segment and extra segments
(the library signs their proofs of mount) and other clients read from them through the master's
grants; without the key those mounts fail with INVALID_PARAMS while a client without a segment
works; a key file that cannot be read fails setup.
"""

import logging
import os
import tempfile
import unittest

from mooncake.store import MooncakeDistributedStore, ReplicateConfig

from _support import start_master

MIB = 1 << 20


def _setup(addr, segment="16MB"):
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", segment, "8MB", "tcp", "", addr)
    return s, rc


class GrantsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.dir = tempfile.TemporaryDirectory()
        cls.key_file = os.path.join(cls.dir.name, "grant.keys")
        with open(cls.key_file, "w") as f:
            f.write("1:%s\n" % os.urandom(32).hex())
        cls.master, cls.addr = start_master("--grant-key-file", cls.key_file)

    @classmethod
    def tearDownClass(cls):
        cls.master.stop()
        cls.dir.cleanup()
        logging.getLogger("mooncake").setLevel(logging.NOTSET)

    def setUp(self):
        self.stores = []
        saved = os.environ.pop("MOONCAKE_GRANT_KEY_FILE", None)
        if saved is not None:
            self.addCleanup(os.environ.__setitem__, "MOONCAKE_GRANT_KEY_FILE", saved)
        self.addCleanup(os.environ.pop, "MOONCAKE_GRANT_KEY_FILE", None)

    def tearDown(self):
        for s in self.stores:
            s.close()

    def _open(self, segment="16MB", want=0):
        s, rc = _setup(self.addr, segment)
        self.stores.append(s)
        self.assertEqual(rc, want, "setup with a %s segment, MOONCAKE_GRANT_KEY_FILE=%r" %
                         (segment, os.environ.get("MOONCAKE_GRANT_KEY_FILE")))
        return s

    def test_mount_with_the_key(self):
        os.environ["MOONCAKE_GRANT_KEY_FILE"] = self.key_file
        owner = self._open()
        del os.environ["MOONCAKE_GRANT_KEY_FILE"]
        reader = self._open(segment=0)  # no segment: needs no key
        v = b"granted " * 1000
        self.assertEqual(owner.put("g/k", v), 0)
        self.assertEqual(owner.get("g/k"), v)
        self.assertEqual(reader.get("g/k"), v)  # from the owner's segment, with the master's grant

        with tempfile.NamedTemporaryFile() as f:
            f.truncate(2 * MIB)
            f.flush()
            r = owner.mount_segment(f.name, MIB, offset=MIB)
            self.assertEqual(r["ret"], 0)
            cfg = ReplicateConfig()
            cfg.preferred_segment = r["segment_ids"][0]
            w = b"in the mounted file " * 50
            self.assertEqual(reader.put("g/seg", w, cfg), 0)
            self.assertEqual(reader.get("g/seg"), w)
            with open(f.name, "rb") as g:
                self.assertIn(w, g.read()[MIB:])
            self.assertEqual(owner.unmount_segment(r["segment_ids"]), 0)
        a = owner.allocate_and_mount_segment(1)
        self.assertEqual(a["ret"], 0)
        self.assertEqual(owner.unmount_and_free_segment(a["segment_ids"]), 0)

    def test_mount_without_the_key(self):
        self._open(want=-600)
        s = self._open(segment=0)
        self.assertEqual(s.allocate_and_mount_segment(1)["ret"], -1)
        with tempfile.NamedTemporaryFile() as f:
            f.truncate(MIB)
            f.flush()
            self.assertEqual(s.mount_segment(f.name, MIB)["ret"], -1)
        self.assertEqual(s.put("g/pure", b"no segment anywhere"), -200)  # the pool has no memory

    def test_bad_key_file(self):
        os.environ["MOONCAKE_GRANT_KEY_FILE"] = os.path.join(self.dir.name, "missing")
        self._open(segment=0, want=-600)
        bad = os.path.join(self.dir.name, "bad.keys")
        with open(bad, "w") as f:
            f.write("1:not-hex\n")
        os.environ["MOONCAKE_GRANT_KEY_FILE"] = bad
        self._open(segment=0, want=-600)


if __name__ == "__main__":
    unittest.main()
