"""The store client's local hot cache, configured as in Mooncake by MC_STORE_LOCAL_HOT_* at setup()."""

import logging
import os
import unittest

from _support import start_master, start_storage_node
from mooncake.store import MooncakeDistributedStore

MIB = 1 << 20
HOT_ENV = ("MC_STORE_LOCAL_HOT_CACHE_SIZE", "MC_STORE_LOCAL_HOT_BLOCK_SIZE", "MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD")


class HotCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        logging.getLogger("mooncake").setLevel(logging.CRITICAL)
        cls.master, cls.addr = start_master()
        try:
            cls.node = start_storage_node(cls.addr, "64MiB")
        except Exception:
            cls.master.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        codes = [cls.node.stop(signal_first=True), cls.master.stop(signal_first=True)]
        assert codes == [0, 0], "master or storage node did not exit cleanly"

    def setUp(self):
        self.saved = {k: os.environ.get(k) for k in HOT_ENV}

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def client(self):
        s = MooncakeDistributedStore()
        rc = s.setup(local_hostname="127.0.0.1", metadata_server="P2PHANDSHAKE", global_segment_size=0,
                     local_buffer_size=16 * MIB, protocol="tcp", rdma_devices="", master_server_addr=self.addr)
        return s, rc

    def test_bad_setting_fails_setup(self):
        os.environ["MC_STORE_LOCAL_HOT_CACHE_SIZE"] = "lots"  # set after the library loaded: read at setup()
        s, rc = self.client()
        self.assertNotEqual(rc, 0)
        s.close()

    def test_reads_see_other_clients_writes(self):
        os.environ["MC_STORE_LOCAL_HOT_CACHE_SIZE"] = str(8 * MIB)
        os.environ["MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD"] = "1"
        reader, rc = self.client()
        self.assertEqual(rc, 0)
        for k in HOT_ENV:
            os.environ.pop(k, None)
        writer, rc = self.client()
        self.assertEqual(rc, 0)
        try:
            v1, v2 = b"a" * 5000, b"b" * 5000
            self.assertEqual(writer.put("hot/k", v1), 0)
            for _ in range(3):  # the first read caches it, the others are served from the cache
                self.assertEqual(reader.get("hot/k"), v1)
            self.assertEqual(writer.remove("hot/k", True), 0)
            self.assertEqual(reader.get("hot/k"), b"")
            self.assertEqual(writer.put("hot/k", v2), 0)
            self.assertEqual(reader.get("hot/k"), v2)
        finally:
            reader.close()
            writer.close()


if __name__ == "__main__":
    unittest.main()
