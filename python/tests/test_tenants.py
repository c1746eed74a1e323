"""Tenants on a master started with --tenants: each store client's token decides its tenant, keys
are scoped to it, a missing or wrong token fails setup, a quota refuses puts with Mooncake's code.
On a Mooncake-style policy (no tokens) the tenant_id a client names (setup's argument or
MOONCAKE_TENANT_ID) decides it instead, and an unregistered tenant's puts fail with -1701.
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

# Mooncake's policy: tenants with quotas and no credentials.
MOONCAKE_POLICY = """version: 1
tenants:
  - name: tenant-a
    quota: 1MB
  - name: tenant-b
"""


def _setup(addr, config=False, **kw):
    """A store set up with the setup keywords kw (tenant_id, tenant_token), by arguments or by a
    config dict."""
    s = MooncakeDistributedStore()
    if config:
        d = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "global_segment_size": "16MB",
             "local_buffer_size": "8MB", "protocol": "tcp", "master_server_address": addr}
        d.update(kw)
        rc = s.setup(d)
    else:
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", "16MB", "8MB", "tcp", "", addr, **kw)
    return s, rc


class _PolicyMaster(unittest.TestCase):
    """A master started with --tenants POLICY, for the class's tests."""

    POLICY = ""

    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.dir = tempfile.TemporaryDirectory()
        path = os.path.join(cls.dir.name, "tenants.yaml")
        with open(path, "w") as f:
            f.write(cls.POLICY)
        cls.master, cls.addr = start_master("--tenants", path)

    @classmethod
    def tearDownClass(cls):
        cls.master.stop()
        cls.dir.cleanup()


class TenantsTest(_PolicyMaster):
    POLICY = POLICY

    def test_isolation_and_quota(self):
        a, rc = _setup(self.addr, config=True, tenant_id="alpha", tenant_token="alpha-token-0001")
        self.assertEqual(rc, 0)
        b, rc = _setup(self.addr, tenant_token="beta-token-0001")
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
            s, rc = _setup(self.addr, tenant_token=tok)
            self.assertNotEqual(rc, 0, "setup with token %r" % (tok,))
            s.close()


def _setup_id(addr, tenant_id=None, config=False):
    """A store naming tenant_id (None: setup's default), by arguments or by a config dict."""
    return _setup(addr, config, **({} if tenant_id is None else {"tenant_id": tenant_id}))


class TenantIDTest(_PolicyMaster):
    """A master whose policy gives no tenant a token: clients name their tenant by tenant_id."""

    POLICY = MOONCAKE_POLICY

    def setUp(self):
        self.stores = []
        saved = os.environ.pop("MOONCAKE_TENANT_ID", None)
        if saved is not None:
            self.addCleanup(os.environ.__setitem__, "MOONCAKE_TENANT_ID", saved)

    def tearDown(self):
        for s in self.stores:
            s.close()

    def _open(self, tenant_id=None, config=False):
        s, rc = _setup_id(self.addr, tenant_id, config)
        self.stores.append(s)
        self.assertEqual(rc, 0, "setup with tenant_id %r" % (tenant_id,))
        return s

    def test_tenants_by_id(self):
        a = self._open("tenant-a")
        b = self._open("tenant-b", config=True)
        self.assertEqual(a.config.tenant_id, "tenant-a")
        self.assertEqual(a.put("k", b"from tenant-a"), 0)
        self.assertEqual(b.put("k", b"from tenant-b"), 0)
        self.assertEqual(a.put("a-only", b"x"), 0)
        self.assertEqual(a.get("k"), b"from tenant-a")
        self.assertEqual(b.get("k"), b"from tenant-b")
        self.assertNotEqual(b.is_exist("a-only"), 1)
        self.assertEqual(b.get("a-only"), b"")

        # MOONCAKE_TENANT_ID names tenant-a for a setup that leaves tenant_id at "default".
        os.environ["MOONCAKE_TENANT_ID"] = "tenant-a"
        try:
            e = self._open()
        finally:
            del os.environ["MOONCAKE_TENANT_ID"]
        self.assertEqual(e.config.tenant_id, "tenant-a")
        self.assertEqual(e.get("k"), b"from tenant-a")
        self.assertEqual(e.is_exist("a-only"), 1)

        # The default tenant is not in the policy: it reads (nothing of tenant-a's), its puts fail.
        for d in (self._open(), self._open("default", config=True)):
            self.assertEqual(d.put("d", b"x"), -1701)  # TENANT_NOT_REGISTERED
            self.assertNotEqual(d.is_exist("a-only"), 1)
            self.assertEqual(d.get("k"), b"")

        # tenant-a's quota is 1 MiB: a 2 MiB put fails with TENANT_QUOTA_EXCEEDED; tenant-b has none.
        self.assertEqual(a.put("big", b"\0" * (2 << 20)), -1700)
        self.assertEqual(b.put("big", b"\0" * (2 << 20)), 0)
        self.assertEqual(a.get("k"), b"from tenant-a")

    def test_bad_tenant_id(self):
        for bad in ("_reserved", "a/b", "x" * 65):
            s, rc = _setup_id(self.addr, bad)
            s.close()
            self.assertEqual(rc, -600, "setup with tenant_id %r" % (bad,))  # INVALID_PARAMS


if __name__ == "__main__":
    unittest.main()
