"""mooncake.mooncake_config: Mooncake's ``MooncakeConfig`` for store clients.

Behaves as Mooncake's module does:

* ``MooncakeConfig.from_file(path)`` reads a JSON file; ``local_hostname``,
  ``metadata_server`` and ``master_server_address`` are required
  (``ValueError: Missing required config field: <name>``), the rest default;
* ``MooncakeConfig.load_from_env()`` reads ``MOONCAKE_CONFIG_PATH``, else the
  ``MOONCAKE_*`` variables (``MOONCAKE_MASTER`` required), else raises;
* every instance is validated: the protocol is trimmed and lower-cased (empty
  is an error, an unknown one is passed through with a warning), sizes must
  not be negative, the required fields must not be blank;
* sizes accept ints and strings such as ``"1e9"``, ``"4gb"``, ``"512 MB"``,
  ``"1.5k"`` (binary units: 1 kb = 1024 bytes);
* booleans accept true/false, 1/0, yes/no, on/off, enable/disable.

``mooncake.config`` is this package's own, more lenient loader used by
``MooncakeDistributedStore.setup()`` when arguments are left out.
"""

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

logger = logging.getLogger("mooncake.mooncake_config")

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1 GiB
DEFAULT_CLIENT_HTTP_PORT = 9300

# Longest suffix first, so "kb" wins over "b".
_UNIT_SUFFIXES = (
    ("kb", 1 << 10), ("mb", 1 << 20), ("gb", 1 << 30), ("tb", 1 << 40),
    ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("t", 1 << 40),
    ("b", 1),
)

# Protocols Mooncake knows (transfer engine transports and store modes). A hint
# for a warning, not a gate: the engine decides what it supports.
KNOWN_PROTOCOLS = frozenset((
    "tcp", "rdma", "efa", "nvmeof", "nvlink", "musa", "nvlink_intra", "hip", "barex", "cxl", "ascend",
    "ub", "ubshmem", "maca", "sunrise_link", "rpc_only",
))

_REQUIRED = ("local_hostname", "metadata_server", "master_server_address")

_TRUE = frozenset(("true", "1", "yes", "on", "enable"))
_FALSE = frozenset(("false", "0", "no", "off", "disable"))


def _parse_segment_size(value):
    """Bytes from an int, a float (truncated) or a string like "4gb", "1e9", " 3 GB "."""
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return int(value)
    text = value.strip().lower()
    if not text:
        raise ValueError("Invalid segment size: empty string")
    for suffix, unit in _UNIT_SUFFIXES:
        if text.endswith(suffix):
            number = text[:-len(suffix)].strip()
            if not number:
                raise ValueError("Invalid segment size: missing number before '%s'" % suffix)
            return int(float(number) * unit)
    return int(float(text))


def _parse_bool(value):
    """A config boolean from a bool, a number or a string; ValueError for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if value is None:
        return False
    text = str(value).strip().lower()
    if not text:
        return False
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("Invalid boolean value: %r" % (value,))


@dataclass
class MooncakeConfig:
    """Settings of a Mooncake store client (field names are the config file's keys)."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"
    enable_client_http_server: bool = False
    client_http_port: int = DEFAULT_CLIENT_HTTP_PORT
    # Not a Mooncake field: the bearer token of a master whose tenant policy
    # gives its tenants tokens (tenant_id then must be the token's tenant or
    # "default"; docs/security.md).
    tenant_token: str = field(default="", repr=False)

    def __post_init__(self):
        if not isinstance(self.protocol, str) or not self.protocol.strip():
            raise ValueError("Invalid protocol: %r. The protocol must be a non-empty string such as 'tcp' or 'rdma'."
                             % (self.protocol,))
        self.protocol = self.protocol.strip().lower()
        if self.protocol not in KNOWN_PROTOCOLS:
            logger.warning("Unrecognised protocol %r; it is passed to the engine unchanged (known: %s).",
                           self.protocol, ", ".join(sorted(KNOWN_PROTOCOLS)))
        for name in ("global_segment_size", "local_buffer_size"):
            if getattr(self, name) < 0:
                raise ValueError("Invalid %s: %s. Sizes must not be negative." % (name, getattr(self, name)))
        for name in _REQUIRED:
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise ValueError("Config field %r must be a non-empty string, got %r." % (name, v))

    @staticmethod
    def from_file(file_path):
        """Reads a JSON config file."""
        with open(file_path) as f:
            d = json.load(f)
        for name in _REQUIRED:
            if name not in d:
                raise ValueError("Missing required config field: %s" % name)
        path = d.get("ssd_offload_path")
        tenant = d.get("tenant_id")
        return MooncakeConfig(
            local_hostname=d.get("local_hostname"),
            metadata_server=d.get("metadata_server"),
            global_segment_size=_parse_segment_size(d.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(d.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=d.get("protocol", "tcp"),
            device_name=d.get("device_name", ""),
            master_server_address=d.get("master_server_address"),
            enable_ssd_offload=_parse_bool(d.get("enable_ssd_offload", False)),
            ssd_offload_path="" if path is None else str(path),
            tenant_id="default" if tenant is None else str(tenant),
            enable_client_http_server=_parse_bool(d.get("enable_client_http_server", False)),
            client_http_port=int(d.get("client_http_port", DEFAULT_CLIENT_HTTP_PORT)),
            tenant_token=str(d.get("tenant_token") or ""),
        )

    @staticmethod
    def load_from_env():
        """MOONCAKE_CONFIG_PATH's file, else the MOONCAKE_* variables (MOONCAKE_MASTER required)."""
        path = os.getenv("MOONCAKE_CONFIG_PATH")
        if path is not None:
            return MooncakeConfig.from_file(path)
        master = os.getenv("MOONCAKE_MASTER")
        if not master:
            raise ValueError("Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor 'MOONCAKE_MASTER' is set.")
        return MooncakeConfig(
            local_hostname=os.getenv("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=os.getenv("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=_parse_segment_size(
                os.getenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(os.getenv("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=os.getenv("MOONCAKE_PROTOCOL", "tcp"),
            device_name=os.getenv("MOONCAKE_DEVICE", ""),
            master_server_address=master,
            enable_ssd_offload=_parse_bool(os.getenv("MOONCAKE_OFFLOAD_ENABLED", "false")),
            ssd_offload_path=os.getenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=os.getenv("MOONCAKE_TENANT_ID", "default"),
            enable_client_http_server=_parse_bool(os.getenv("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "false")),
            client_http_port=int(os.getenv("MOONCAKE_CLIENT_HTTP_PORT", DEFAULT_CLIENT_HTTP_PORT)),
            tenant_token=os.getenv("MOONCAKE_TENANT_TOKEN", ""),
        )
