"""Configuration of the store client, read the way Mooncake reads it.

Sources, in order of precedence:

1. the JSON file named by ``$MOONCAKE_CONFIG_PATH`` (keys ``local_hostname``,
   ``metadata_server``, ``global_segment_size``, ``local_buffer_size``,
   ``protocol``, ``device_name``, ``master_server_address``);
2. otherwise the environment: ``MOONCAKE_MASTER``, ``MOONCAKE_TE_META_DATA_SERVER``,
   ``MOONCAKE_PROTOCOL``, ``MOONCAKE_DEVICE``, ``MOONCAKE_GLOBAL_SEGMENT_SIZE``,
   ``MOONCAKE_LOCAL_BUFFER_SIZE``, ``MOONCAKE_LOCAL_HOSTNAME``;
3. the defaults below.

Sizes accept an int or a string with a binary unit: ``"4gb"``, ``"512MB"``,
``"3.125 GiB"``, ``"65536"`` (1 kb = 1024 bytes, as in Mooncake).
"""

import json
import os
import re

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1 GiB
DEFAULT_MASTER = "127.0.0.1:50051"
DEFAULT_METADATA_SERVER = "P2PHANDSHAKE"
DEFAULT_PROTOCOL = "tcp"
DEFAULT_LOCAL_HOSTNAME = "127.0.0.1"

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(value):
    """Parses a byte size: an int, or a string like "4gb", "512 MiB", "1024".

    Raises ValueError for negative numbers, unknown units and garbage.
    """
    if isinstance(value, bool):
        raise ValueError("size must be a number or a string, not %r" % (value,))
    if isinstance(value, int):
        if value < 0:
            raise ValueError("size must not be negative: %d" % value)
        return value
    if isinstance(value, float):
        if value < 0 or value != value:
            raise ValueError("invalid size: %r" % (value,))
        return int(value)
    if not isinstance(value, str):
        raise ValueError("size must be a number or a string, not %r" % (value,))
    m = _SIZE_RE.match(value)
    if not m:
        raise ValueError("invalid size: %r" % (value,))
    unit = m.group(2).lower()
    if unit not in _UNITS:
        raise ValueError("invalid size unit in %r" % (value,))
    return int(float(m.group(1)) * _UNITS[unit])


class MooncakeConfig(object):
    """Store client settings; field names match Mooncake's config file keys."""

    FIELDS = (
        "local_hostname",
        "metadata_server",
        "global_segment_size",
        "local_buffer_size",
        "protocol",
        "device_name",
        "master_server_address",
    )

    def __init__(self, local_hostname=DEFAULT_LOCAL_HOSTNAME, metadata_server=DEFAULT_METADATA_SERVER,
                 global_segment_size=DEFAULT_GLOBAL_SEGMENT_SIZE, local_buffer_size=DEFAULT_LOCAL_BUFFER_SIZE,
                 protocol=DEFAULT_PROTOCOL, device_name="", master_server_address=DEFAULT_MASTER):
        self.local_hostname = str(local_hostname)
        self.metadata_server = str(metadata_server)
        self.global_segment_size = parse_size(global_segment_size)
        self.local_buffer_size = parse_size(local_buffer_size)
        self.protocol = str(protocol)
        self.device_name = str(device_name or "")
        self.master_server_address = str(master_server_address)

    def __repr__(self):
        return "MooncakeConfig(%s)" % ", ".join("%s=%r" % (f, getattr(self, f)) for f in self.FIELDS)

    def __eq__(self, other):
        return isinstance(other, MooncakeConfig) and all(
            getattr(self, f) == getattr(other, f) for f in self.FIELDS)

    def to_dict(self):
        return dict((f, getattr(self, f)) for f in self.FIELDS)

    @classmethod
    def from_dict(cls, d):
        """Builds a config from a dict of Mooncake config keys; unknown keys are ignored."""
        if not isinstance(d, dict):
            raise ValueError("mooncake config must be a JSON object")
        kwargs = {}
        for f in cls.FIELDS:
            if f in d and d[f] is not None:
                kwargs[f] = d[f]
        # Older Mooncake files spell the master key "master_server_addr".
        if "master_server_address" not in kwargs and d.get("master_server_addr"):
            kwargs["master_server_address"] = d["master_server_addr"]
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path):
        """Reads a Mooncake JSON config file."""
        with open(path) as f:
            return cls.from_dict(json.load(f))

    @classmethod
    def load_from_env(cls, environ=None):
        """Reads MOONCAKE_CONFIG_PATH when set, else the MOONCAKE_* variables."""
        env = os.environ if environ is None else environ
        path = env.get("MOONCAKE_CONFIG_PATH")
        if path:
            return cls.from_file(path)
        return cls(
            local_hostname=env.get("MOONCAKE_LOCAL_HOSTNAME") or DEFAULT_LOCAL_HOSTNAME,
            metadata_server=env.get("MOONCAKE_TE_META_DATA_SERVER") or DEFAULT_METADATA_SERVER,
            global_segment_size=env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE") or DEFAULT_GLOBAL_SEGMENT_SIZE,
            local_buffer_size=env.get("MOONCAKE_LOCAL_BUFFER_SIZE") or DEFAULT_LOCAL_BUFFER_SIZE,
            protocol=env.get("MOONCAKE_PROTOCOL") or DEFAULT_PROTOCOL,
            device_name=env.get("MOONCAKE_DEVICE") or "",
            master_server_address=env.get("MOONCAKE_MASTER") or DEFAULT_MASTER,
        )
