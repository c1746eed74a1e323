"""Tenants on a master started with --tenants: each store client's token decides its tenant, keys
are scoped to it, a missing or wrong token fails setup, a quota refuses puts with Mooncake's code.
"""

import logging
import os
import tempfile
import unittest

from mooncake.store import MooncakeDistributedStore

from _support import start_master

POLICY = """version: 1
tenants:
  - name: alpha
    quota: 1MB
    tokens: [{token: alpha-token-0001}]
  - name: beta
    tokens: [{token: beta-token-0001}]
"""


def _setup(addr, token=None, config=False):
    s = MooncakeDistributedStore()
    if config:
        rc = s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "global_segment_size": "16MB",
                      "local_buffer_size": "8MB", "protocol": "tcp", "master_server_address": addr,
                      "tenant_id": "alpha", "tenant_token": token})
    else:
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", "16MB", "8MB", "tcp", "", addr, tenant_token=token)
    return s, rc


class TenantsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.dir = tempfile.TemporaryDirectory()
        path = os.path.join(cls.dir.name, "tenants.yaml")
        with open(path, "w") as f:
            f.write(POLICY)
        cls.master, cls.addr = start_master("--tenants", path)

    @classmethod
    def tearDownClass(cls):
        cls.master.stop()
        cls.dir.cleanup()

    def test_isolation_and_quota(self):
        a, rc = _setup(self.addr, "alpha-token-0001", config=True)
        self.assertEqual(rc, 0)
        b, rc = _setup(self.addr, "beta-token-0001")
        self.assertEqual(rc, 0)
        try:
            self.assertEqual(a.put("k", b"from alpha"), 0)
            self.assertEqual(b.put("k", b"from beta"), 0)
            self.assertEqual(a.put("alpha-only", b"x"), 0)
            self.assertEqual(a.get("k"), b"from alpha")
            self.assertEqual(b.get("k"), b"from beta")
            self.assertNotEqual(b.is_exist("alpha-only"), 1)
            self.assertEqual(b.get("alpha-only"), b"")
            self.assertEqual(b.remove_all(force=True), 1)  # beta's own key only
            self.assertEqual(a.is_exist("alpha-only"), 1)
            # alpha's quota is 1 MiB: a 2 MiB put fails with TENANT_QUOTA_EXCEEDED.
            self.assertEqual(a.put("big", b"\0" * (2 << 20)), -1700)
            self.assertEqual(b.put("big", b"\0" * (2 << 20)), 0)
        finally:
            a.close()
            b.close()

    def test_bad_tokens(self):
        for tok in (None, "", "alpha-token-0002"):
            s, rc = _setup(self.addr, tok)
            self.assertNotEqual(rc, 0, "setup with token %r" % (tok,))
            s.close()


if __name__ == "__main__":
    unittest.main()
