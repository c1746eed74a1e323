import json
import os
import tempfile
import unittest

from mooncake import config
from mooncake.config import DEFAULT_GLOBAL_SEGMENT_SIZE, DEFAULT_LOCAL_BUFFER_SIZE, parse_size
from mooncake.mooncake_config import MooncakeConfig


class ParseSizeTest(unittest.TestCase):
    def test_valid(self):
        cases = [
            (0, 0),
            (4096, 4096),
            ("4096", 4096),
            ("4gb", 4 << 30),
            ("4GB", 4 << 30),
            ("4 GiB", 4 << 30),
            ("512mb", 512 << 20),
            ("512M", 512 << 20),
            ("64kb", 64 << 10),
            ("1tb", 1 << 40),
            ("3.125gb", 3355443200),
            ("10b", 10),
            (" 2 mb ", 2 << 20),
        ]
        for text, want in cases:
            with self.subTest(text=text):
                self.assertEqual(parse_size(text), want)

    def test_invalid(self):
        for text in ["", "gb", "4xb", "-1", -1, "4 g b", None, True, "1e9", [1]]:
            with self.subTest(text=text):
                with self.assertRaises(ValueError):
                    parse_size(text)


class ConfigTest(unittest.TestCase):
    def test_defaults_from_empty_env(self):
        cfg = config.load_from_env({})
        self.assertEqual(cfg.master_server_address, "127.0.0.1:50051")
        self.assertEqual(cfg.metadata_server, "P2PHANDSHAKE")
        self.assertEqual(cfg.protocol, "tcp")
        self.assertEqual(cfg.global_segment_size, DEFAULT_GLOBAL_SEGMENT_SIZE)
        self.assertEqual(cfg.local_buffer_size, DEFAULT_LOCAL_BUFFER_SIZE)
        self.assertIsInstance(cfg, MooncakeConfig)

    def test_blank_values_take_defaults(self):
        cfg = config.from_dict({"local_hostname": " ", "protocol": "", "global_segment_size": None,
                                "master_server_addr": "127.0.0.1:7001"})
        self.assertEqual(cfg.local_hostname, "127.0.0.1")
        self.assertEqual(cfg.protocol, "tcp")
        self.assertEqual(cfg.global_segment_size, DEFAULT_GLOBAL_SEGMENT_SIZE)
        self.assertEqual(cfg.master_server_address, "127.0.0.1:7001")

    def test_env(self):
        env = {
            "MOONCAKE_MASTER": "127.0.0.1:7000",
            "MOONCAKE_PROTOCOL": "rdma",
            "MOONCAKE_DEVICE": "mlx5_0",
            "MOONCAKE_GLOBAL_SEGMENT_SIZE": "4gb",
            "MOONCAKE_LOCAL_BUFFER_SIZE": "256mb",
            "MOONCAKE_TE_META_DATA_SERVER": "http://127.0.0.1:8080/metadata",
            "MOONCAKE_LOCAL_HOSTNAME": "127.0.0.2",
        }
        cfg = config.load_from_env(env)
        self.assertEqual(cfg, MooncakeConfig(
            local_hostname="127.0.0.2", metadata_server="http://127.0.0.1:8080/metadata",
            global_segment_size=4 << 30, local_buffer_size=256 << 20, protocol="rdma",
            device_name="mlx5_0", master_server_address="127.0.0.1:7000"))

    def test_config_file_wins_over_env(self):
        data = {"local_hostname": "127.0.0.3", "metadata_server": "P2PHANDSHAKE",
                "global_segment_size": "1gb", "local_buffer_size": 1048576, "protocol": "tcp",
                "device_name": "", "master_server_address": "127.0.0.1:9999", "unknown_key": 1}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(data, f)
        try:
            cfg = config.load_from_env({"MOONCAKE_CONFIG_PATH": f.name, "MOONCAKE_MASTER": "x:1"})
        finally:
            os.unlink(f.name)
        self.assertEqual(cfg.master_server_address, "127.0.0.1:9999")
        self.assertEqual(cfg.global_segment_size, 1 << 30)
        self.assertEqual(cfg.local_buffer_size, 1 << 20)
        self.assertEqual(cfg.local_hostname, "127.0.0.3")

    def test_bad_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write("[1, 2]")
        try:
            with self.assertRaises(ValueError):
                config.load_from_env({"MOONCAKE_CONFIG_PATH": f.name})
        finally:
            os.unlink(f.name)
        with self.assertRaises(ValueError):
            config.from_dict({"global_segment_size": "lots"})


if __name__ == "__main__":
    unittest.main()
