"""mooncake.mooncake_store_service: the REST service as a process over a master, used over HTTP."""

import json
import os
import socket
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

from _support import Child, start_master


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class StoreServiceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.master, cls.addr = start_master()
        cls.tmp = tempfile.TemporaryDirectory()
        cfg = os.path.join(cls.tmp.name, "mooncake.json")
        with open(cfg, "w") as f:
            json.dump({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                       "master_server_address": "127.0.0.1:1", "global_segment_size": "32MB",
                       "local_buffer_size": "16MB", "protocol": "tcp"}, f)
        cls.port = _free_port()
        # -D overrides the file's (wrong) master address
        cls.svc = Child([sys.executable, "-m", "mooncake.mooncake_store_service", "--config", cfg,
                         "-Dmaster_server_address=" + cls.addr, "--port", str(cls.port), "--max-wait-time", "20"])
        cls.svc.read_until(lambda line: "store service ready" in line, timeout=30)
        cls.base = "http://127.0.0.1:%d" % cls.port

    @classmethod
    def tearDownClass(cls):
        cls.svc.stop(signal_first=True)
        cls.master.stop(signal_first=True)
        cls.tmp.cleanup()

    def test_put_get_exist_remove(self):
        self.assertEqual(_call("PUT", self.base + "/api/put", {"key": "svc/a", "value": "hello"})[0], 200)
        self.assertEqual(_call("GET", self.base + "/api/get/svc%2Fa"), (200, b"hello"))
        code, body = _call("GET", self.base + "/api/exist/svc%2Fa")
        self.assertEqual((code, json.loads(body)), (200, {"exists": True}))
        code, body = _call("GET", self.base + "/api/get/nope")
        self.assertEqual(code, 404)
        self.assertIn("Key not found", json.loads(body)["error"])
        self.assertEqual(json.loads(_call("GET", self.base + "/api/exist/nope")[1]), {"exists": False})
        self.assertEqual(_call("PUT", self.base + "/api/put", {"value": "x"})[0], 400)
        self.assertEqual(_call("PUT", self.base + "/api/put", {"key": "k"})[0], 500)

    def test_remove_and_remove_all(self):
        _call("PUT", self.base + "/api/put", {"key": "svc/r", "value": "v"})
        _call("PUT", self.base + "/api/put", {"key": "svc/s", "value": "v"})
        self.assertEqual(_call("DELETE", self.base + "/api/remove/svc%2Fr")[0], 200)
        self.assertEqual(_call("GET", self.base + "/api/get/svc%2Fr")[0], 404)
        self.assertEqual(_call("DELETE", self.base + "/api/remove/svc%2Fr")[0], 500)
        code, body = _call("DELETE", self.base + "/api/remove_all")
        self.assertEqual(code, 200)
        self.assertTrue(json.loads(body)["status"].startswith("success removed"))
        self.assertEqual(_call("GET", self.base + "/api/exist/svc%2Fs")[1], b'{"exists": false}')

    def test_mount_routes_answer_errors(self):
        code, body = _call("POST", self.base + "/api/mount", {"size": 0})
        self.assertEqual(code, 400)
        code, body = _call("POST", self.base + "/api/mount", {"size": 4096})
        self.assertEqual(code, 200)  # one more segment of the service's client, rounded up to 4 MiB
        mounted = json.loads(body)
        self.assertEqual((len(mounted["segment_ids"]), mounted["allocated_size"]), (1, 4 << 20))
        self.assertEqual(_call("POST", self.base + "/api/unmount", {"segment_ids": mounted["segment_ids"]})[0], 200)
        self.assertEqual(_call("POST", self.base + "/api/unmount", {"segment_ids": mounted["segment_ids"]})[0], 500)
        self.assertEqual(_call("POST", self.base + "/api/mount_shm", {"name": "../x", "size": 1})[0], 400)
        code, body = _call("POST", self.base + "/api/reconfigure", {"mode": "prefill"})
        self.assertEqual((code, json.loads(body)["mode"]), (200, "prefill"))
        self.assertEqual(_call("POST", self.base + "/api/reconfigure", {"mode": "x"})[0], 400)
        self.assertEqual(_call("POST", self.base + "/api/unmount_local_disk", {"grace_period_seconds": -1})[0], 400)
        self.assertEqual(_call("GET", self.base + "/api/none")[0], 404)


if __name__ == "__main__":
    unittest.main()
