"""Mooncake's command names (python/bin/*): gflags translation and real processes."""

import logging
import os
import signal
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

from mooncake import cli
from mooncake.store import MooncakeDistributedStore

from _support import ROOT, Child, free_port, mooncake_bin

BIN = os.path.join(ROOT, "python", "bin")


def command(name, *args):
    """Runs Mooncake's command name: the console script installed next to
    this interpreter (the wheel), else the checkout's python/bin wrapper."""
    env = {"MOONCAKE_BIN": mooncake_bin()}
    script = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.isfile(script):
        return Child([script] + list(args), env=env)
    return Child([sys.executable, os.path.join(BIN, name)] + list(args), env=env)


class GflagsTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(cli.parse_gflags(["--port=1", "-v", "2", "--enable_ha", "--noenable_gc", "--x", "y"]),
                         {"port": "1", "v": "2", "enable_ha": "true", "enable_gc": "false", "x": "y"})
        with self.assertRaises(ValueError):
            cli.parse_gflags(["stray"])

    def test_master(self):
        argv, meta = cli.master_argv(cli.parse_gflags([
            "--port=50051", "--eviction_high_watermark_ratio=0.9", "--default_kv_lease_ttl=500", "--metrics_port=9003",
            "--enable_ha=false", "--max_threads=4"]))
        self.assertEqual(argv, ["master", "--port", "50051", "--eviction-high-watermark", "0.9", "--lease-ttl", "500ms",
                                "--http-port", "9003"])
        self.assertIsNone(meta)
        _, meta = cli.master_argv({"enable_http_metadata_server": "true", "http_metadata_server_port": "8081"})
        self.assertEqual(meta, ["metadata-server", "--port", "8081", "--host", "0.0.0.0"])

    def test_client_and_bench(self):
        self.assertEqual(cli.client_argv({"master_server_address": "h:1", "port": "2", "protocol": "rdma",
                                          "global_segment_size": "4gb"}),
                         ["client", "--master", "h:1", "--port", "2", "--segment-size", "4gb", "--transport", "tcp"])
        self.assertEqual(cli.bench_argv({"mode": "initiator", "segment_id": "h:3", "operation": "read",
                                         "duration": "2", "metadata_server": "P2PHANDSHAKE"}),
                         ["bench", "transfer", "--mode", "initiator", "--target", "h:3", "--op", "read",
                          "--duration", "2s"])
        self.assertEqual(cli.metadata_server_argv({"port": "8090"}),
                         ["metadata-server", "--port", "8090", "--host", "0.0.0.0"])


    def test_master_passthrough(self):
        self.assertEqual(cli.master_passthrough_argv(["-port=1", "--noenable_ha", "--cluster_id", "c", "--v=1",
                                                      "--enable_http_metadata_server=true"]),
                         ["master", "--port=1", "--enable_ha=false", "--cluster_id", "c", "--v=1",
                          "--enable_http_metadata_server=true"])


class WheelTest(unittest.TestCase):
    """The installed distribution (make test installs the wheel into a venv)."""

    def setUp(self):
        import importlib.metadata as md
        try:
            self.dist = md.distribution("mooncake-go")
        except md.PackageNotFoundError:
            self.skipTest("mooncake-go is not installed (tests run from the checkout)")

    def test_metadata_and_commands(self):
        meta = self.dist.metadata
        self.assertIn("reimplemented in Go", meta["Summary"])
        self.assertEqual(meta["License"], "Apache-2.0")
        scripts = {e.name: e.value for e in self.dist.entry_points if e.group == "console_scripts"}
        self.assertEqual(scripts, {
            "mooncake": "mooncake.cli:mooncake_main", "mooncake_master": "mooncake.cli:master_main",
            "mooncake_client": "mooncake.cli:client_main",
            "mooncake_http_metadata_server": "mooncake.cli:http_metadata_server_main",
            "transfer_engine_bench": "mooncake.cli:transfer_engine_bench_main",
            "mc_store_rest_server": "mooncake.mooncake_store_service:sync_main",
            "transfer_engine_topology_dump": "mooncake.transfer_engine_topology_dump:main"})
        files = {str(f) for f in self.dist.files}
        self.assertIn("mooncake/_lib/libmooncake.so", files)
        self.assertIn("mooncake/_bin/mooncake", files)
        import mooncake
        self.assertTrue(os.path.realpath(mooncake.__file__).startswith(os.path.realpath(str(self.dist.locate_file("")))))
        env = dict(os.environ)
        env.pop("MOONCAKE_BIN", None)  # the binary bundled in the wheel
        out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "mooncake"), "--version"], env=env,
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith("mooncake "), out.stdout)


class CommandsTest(unittest.TestCase):
    def test_master_client_and_metadata_server(self):
        meta_port = free_port()
        master = command("mooncake_master", "--port=0", "--metrics_port=-1", "--default_kv_lease_ttl=200",
                         "--max_threads=2", "--enable_http_metadata_server",
                         "--http_metadata_server_port=%d" % meta_port, "--http_metadata_server_host=127.0.0.1")
        try:
            line = master.read_until(lambda l: "grpc=" in l, timeout=60)
            addr = line.split("grpc=", 1)[1].split()[0]
            node = command("mooncake_client", "--master_server_address=" + addr, "--port=0",
                           "--global_segment_size=16mb", "--host=127.0.0.1", "--protocol=tcp")
            try:
                node.read_until(lambda l: "mounted" in l, timeout=60)
                s = MooncakeDistributedStore()
                logging.getLogger("mooncake").setLevel(logging.CRITICAL)
                try:
                    self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", addr), 0)
                    self.assertEqual(s.put("cli/k", b"on the node"), 0)
                    self.assertEqual(s.get("cli/k"), b"on the node")
                finally:
                    s.close()
                    logging.getLogger("mooncake").setLevel(logging.NOTSET)
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % meta_port, timeout=10) as r:
                    self.assertEqual(r.read(), b"OK")
                with self.assertRaises(urllib.error.HTTPError) as cm:
                    urllib.request.urlopen("http://127.0.0.1:%d/metadata?key=none" % meta_port, timeout=10)
                self.assertEqual(cm.exception.code, 404)
            finally:
                self.assertEqual(node.stop(signal_first=True), 0)
        finally:
            self.assertIn(master.stop(signal_first=True), (0, -signal.SIGTERM))


if __name__ == "__main__":
    unittest.main()
