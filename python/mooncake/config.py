"""The settings ``MooncakeDistributedStore.setup()`` falls back on, read leniently.

``mooncake.mooncake_config.MooncakeConfig`` (Mooncake's class) is the one config
type; this module reads it without Mooncake's required fields, so that
``setup()`` with arguments left out works from defaults alone. Sources, in order
of precedence:

1. the JSON file named by ``$MOONCAKE_CONFIG_PATH`` (keys ``local_hostname``,
   ``metadata_server``, ``global_segment_size``, ``local_buffer_size``,
   ``protocol``, ``device_name``, ``master_server_address``, ``tenant_id``);
2. otherwise the environment: ``MOONCAKE_MASTER``, ``MOONCAKE_TE_META_DATA_SERVER``,
   ``MOONCAKE_PROTOCOL``, ``MOONCAKE_DEVICE``, ``MOONCAKE_GLOBAL_SEGMENT_SIZE``,
   ``MOONCAKE_LOCAL_BUFFER_SIZE``, ``MOONCAKE_LOCAL_HOSTNAME``, ``MOONCAKE_TENANT_ID``;
3. the defaults below.

A value left out, ``None`` or blank takes its default. Sizes accept an int or a
string with a binary unit: ``"4gb"``, ``"512MB"``, ``"3.125 GiB"``, ``"65536"``
(1 kb = 1024 bytes, as in Mooncake).
"""

import json
import os
import re

from .mooncake_config import DEFAULT_GLOBAL_SEGMENT_SIZE, DEFAULT_LOCAL_BUFFER_SIZE, MooncakeConfig

__all__ = ["parse_size", "from_dict", "from_file", "load_from_env", "DEFAULT_GLOBAL_SEGMENT_SIZE",
           "DEFAULT_LOCAL_BUFFER_SIZE", "DEFAULT_MASTER", "DEFAULT_METADATA_SERVER", "DEFAULT_PROTOCOL",
           "DEFAULT_LOCAL_HOSTNAME"]

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


def _config(local_hostname=None, metadata_server=None, global_segment_size=None, local_buffer_size=None,
            protocol=None, device_name=None, master_server_address=None, tenant_id=None):
    """A MooncakeConfig of the seven setup fields and tenant_id, defaults for those None or blank."""
    def text(v, default):
        v = "" if v is None else str(v)
        return v if v.strip() else default

    def size(v, default):
        return default if v is None or (isinstance(v, str) and not v.strip()) else parse_size(v)

    return MooncakeConfig(
        local_hostname=text(local_hostname, DEFAULT_LOCAL_HOSTNAME),
        metadata_server=text(metadata_server, DEFAULT_METADATA_SERVER),
        global_segment_size=size(global_segment_size, DEFAULT_GLOBAL_SEGMENT_SIZE),
        local_buffer_size=size(local_buffer_size, DEFAULT_LOCAL_BUFFER_SIZE),
        protocol=text(protocol, DEFAULT_PROTOCOL),
        device_name=text(device_name, ""),
        master_server_address=text(master_server_address, DEFAULT_MASTER),
        tenant_id=text(tenant_id, "default"),
    )


def from_dict(d):
    """A MooncakeConfig from a dict of Mooncake's config keys; unknown keys are ignored.

    Raises ValueError for a non-dict and for a bad size.
    """
    if not isinstance(d, dict):
        raise ValueError("mooncake config must be a JSON object")
    # Older Mooncake files spell the master key "master_server_addr".
    return _config(d.get("local_hostname"), d.get("metadata_server"), d.get("global_segment_size"),
                   d.get("local_buffer_size"), d.get("protocol"), d.get("device_name"),
                   d.get("master_server_address") or d.get("master_server_addr"), d.get("tenant_id"))


def from_file(path):
    """A MooncakeConfig from a Mooncake JSON config file (as from_dict)."""
    with open(path) as f:
        return from_dict(json.load(f))


def load_from_env(environ=None):
    """MOONCAKE_CONFIG_PATH's file when set, else the MOONCAKE_* variables of environ
    (default os.environ), else the defaults."""
    env = os.environ if environ is None else environ
    path = env.get("MOONCAKE_CONFIG_PATH")
    if path:
        return from_file(path)
    return _config(
        local_hostname=env.get("MOONCAKE_LOCAL_HOSTNAME"),
        metadata_server=env.get("MOONCAKE_TE_META_DATA_SERVER"),
        global_segment_size=env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE"),
        local_buffer_size=env.get("MOONCAKE_LOCAL_BUFFER_SIZE"),
        protocol=env.get("MOONCAKE_PROTOCOL"),
        device_name=env.get("MOONCAKE_DEVICE"),
        master_server_address=env.get("MOONCAKE_MASTER"),
        tenant_id=env.get("MOONCAKE_TENANT_ID"),
    )
