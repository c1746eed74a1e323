"""MooncakeDistributedStore's lifecycle: setup (arguments, a config dict or a
MooncakeConfig, the environment), setup_dummy, close, health_check, get_hostname.
"""

import ctypes
import json
import os
import random
import socket

from . import _native
from . import config as _config
from ._store_base import HC_HEALTHY, HC_MASTER_UNREACHABLE, HC_NOT_INITIALIZED, ErrorCode, log
from .config import parse_size

# Environment variables read at setup(), as Mooncake's client reads them:
# the local hot cache's size in bytes (0 or unset: off), largest value
# cached, and reads a key needs before it is cached.
_SETUP_ENV = ("MC_STORE_LOCAL_HOT_CACHE_SIZE", "MC_STORE_LOCAL_HOT_BLOCK_SIZE", "MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD")

# Mooncake picks a store client's RPC port in this range when local_hostname has none.
_PORT_RANGE = (12300, 14300)


def _has_port(host):
    host = host.strip()
    if host.startswith("["):
        return "]:" in host
    return host.count(":") == 1 and host.rsplit(":", 1)[1].isdigit()


def _free_port(host):
    """A port in Mooncake's range that is free on host right now (0 when none is found)."""
    lo, hi = _PORT_RANGE
    for _ in range(64):
        port = random.randint(lo, hi)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((host if host not in ("localhost",) else "127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    return 0


def _bool(v):
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("1", "true", "yes", "on", "enable"):
            return True
        if s in ("", "0", "false", "no", "off", "disable"):
            return False
        raise ValueError("not a boolean: %r" % (v,))
    return bool(v)


# Mooncake's FileStorage defaults (mooncake-store/include/storage_backend.h).
_SSD_DEFAULT_PATH = "/data/file_storage"
_SSD_DEFAULT_CAPACITY = 2 << 40


def _ssd_offload_options(path):
    """The disk tier behind this client's segment for setup(enable_ssd_offload=True): the
    directory is ssd_offload_path, else MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, else Mooncake's
    /data/file_storage; at most MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES (2 TB) are kept. Objects
    go to disk when the master evicts them from this client's segment (offload on evict, the
    only mode here); values read from disk are put back into memory unless
    MOONCAKE_PROMOTION_ON_HIT is false."""
    env = os.environ
    directory = str(path or env.get("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH") or _SSD_DEFAULT_PATH)
    capacity = parse_size(env.get("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES") or _SSD_DEFAULT_CAPACITY)
    if capacity <= 0:
        raise ValueError("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES must be positive")
    return {"dir": os.path.abspath(directory), "capacity": int(capacity), "offload_on_evict": True,
            "promotion_on_hit": _bool(env.get("MOONCAKE_PROMOTION_ON_HIT", "true"))}


def _names_tenant(tenant_id):
    """Whether tenant_id names a tenant: None, "" and "default" name none."""
    return tenant_id is not None and str(tenant_id) not in ("", "default")


def _tenant_id(arg, configured):
    """The tenant a setup names: its tenant_id argument, else the configuration's, else
    MOONCAKE_TENANT_ID (as Python sees the environment at setup), else "default" (none)."""
    for v in (arg, configured, os.environ.get("MOONCAKE_TENANT_ID")):
        if _names_tenant(v):
            return str(v)
    return "default"


class SetupMixin(object):
    """Setting the client up and closing it."""

    def setup(self, local_hostname=None, metadata_server=None, global_segment_size=None, local_buffer_size=None,
              protocol=None, rdma_devices=None, master_server_addr=None, engine=None, enable_ssd_offload=False,
              ssd_offload_path="", tenant_id="default", enable_client_http_server=False, client_http_port=9300,
              config=None, tenant_token=None):
        """Connects to the master and, when global_segment_size > 0, contributes that much memory.

        Mooncake's two forms: ``setup(local_hostname, metadata_server, global_segment_size,
        local_buffer_size, protocol, rdma_devices, master_server_addr, engine=None,
        enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
        enable_client_http_server=False, client_http_port=9300)`` and ``setup(config)`` with a
        dict (Mooncake's keys) or a MooncakeConfig object. Positional arguments left out come
        from MOONCAKE_CONFIG_PATH / MOONCAKE_* (mooncake.config). Sizes may be strings
        ("16MB", "4gb"). ``enable_ssd_offload=True`` puts a disk tier behind this client's
        segment (``ssd_offload_path``, else ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH``). On a master
        with tenants (docs/security.md) ``tenant_id`` names the client's tenant ("default": the
        config file's ``tenant_id``, else ``MOONCAKE_TENANT_ID``, else none): without a token
        the master admits it when its policy lets that tenant in without credentials (a policy
        giving no tenant a token admits any; an unregistered tenant's puts fail with
        TENANT_NOT_REGISTERED, -1701). ``tenant_token`` (else the config's, else
        ``MOONCAKE_TENANT_TOKEN``) is the tenant's credential; with one, ``tenant_id`` must be
        its tenant or "default". A master without tenants ignores both. On a master with
        data-path grants, ``MOONCAKE_GRANT_KEY_FILE`` (the master's grant key file) lets this
        client mount segments; without it a mount fails with INVALID_PARAMS. The client HTTP
        server is accepted and ignored with a warning. Returns 0, or a negative code.
        """
        if config is None and local_hostname is not None and not isinstance(local_hostname, (str, bytes)):
            config, local_hostname = local_hostname, None
        if config is not None:
            return self._setup_config(config)
        if self._h:
            log.error("mooncake: setup: store already set up")
            return ErrorCode.INVALID_PARAMS
        try:
            cfg = _config.load_from_env()
            if local_hostname is not None:
                cfg.local_hostname = str(local_hostname)
            if metadata_server is not None:
                cfg.metadata_server = str(metadata_server)
            if global_segment_size is not None:
                cfg.global_segment_size = parse_size(global_segment_size)
            if local_buffer_size is not None:
                cfg.local_buffer_size = parse_size(local_buffer_size)
            if protocol is not None:
                cfg.protocol = str(protocol).strip().lower()
            if rdma_devices is not None:
                cfg.device_name = str(rdma_devices)
            if master_server_addr is not None:
                cfg.master_server_address = str(master_server_addr)
            if tenant_token is not None:
                cfg.tenant_token = str(tenant_token)
            cfg.tenant_id = _tenant_id(tenant_id, cfg.tenant_id)
            ssd = _bool(enable_ssd_offload)
            http = _bool(enable_client_http_server)
        except (ValueError, OSError) as exc:
            log.error("mooncake: setup: bad configuration: %s", exc)
            return ErrorCode.INVALID_PARAMS
        if engine is not None:
            log.warning("mooncake: setup: sharing a TransferEngine is not supported; the store uses its own")
        disk = None
        if ssd and cfg.global_segment_size == 0:
            log.warning("mooncake: setup: SSD offload needs a global segment: with global_segment_size=0 this "
                        "client holds no objects to offload; no disk tier")
        elif ssd:
            try:
                disk = _ssd_offload_options(ssd_offload_path)
            except ValueError as exc:
                log.error("mooncake: setup: bad SSD offload setting: %s", exc)
                return ErrorCode.INVALID_PARAMS
        elif ssd_offload_path:
            log.warning("mooncake: setup: ssd_offload_path %r is ignored without enable_ssd_offload=True",
                        ssd_offload_path)
        if http:
            log.warning("mooncake: setup: the client HTTP server (port %s) is not supported; not started",
                        client_http_port)
        return self._open(cfg, disk)

    def _setup_config(self, config):
        """setup(config): a dict with Mooncake's keys, or an object with MooncakeConfig's attributes."""
        if not isinstance(config, dict):
            d = {}
            for k in ("local_hostname", "metadata_server", "global_segment_size", "local_buffer_size", "protocol",
                      "device_name", "master_server_address", "enable_ssd_offload", "ssd_offload_path", "tenant_id",
                      "enable_client_http_server", "client_http_port", "tenant_token"):
                if getattr(config, k, None) is not None:
                    d[k] = getattr(config, k)
            config = d
        d = dict(config)
        for missing in ("local_hostname", "metadata_server"):
            if not str(d.get(missing) or "").strip():
                log.error("mooncake: setup: config is missing %r", missing)
                return ErrorCode.INVALID_PARAMS
        known = {"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size", "protocol",
                 "rdma_devices", "device_name", "master_server_addr", "master_server_address", "ipc_socket_path",
                 "enable_ssd_offload", "ssd_offload_path", "tenant_id", "enable_client_http_server",
                 "client_http_port", "tenant_token"}
        for k in sorted(set(d) - known):
            log.warning("mooncake: setup: unknown config key %r ignored", k)
        if d.get("ipc_socket_path"):
            log.warning("mooncake: setup: ipc_socket_path is not used (dummy clients attach with setup_dummy); ignored")
        return self.setup(
            str(d["local_hostname"]), str(d["metadata_server"]),
            d.get("global_segment_size", 16 * 1024 * 1024), d.get("local_buffer_size", 16 * 1024 * 1024),
            d.get("protocol", "tcp"), d.get("rdma_devices", d.get("device_name", "")) or "",
            d.get("master_server_addr", d.get("master_server_address", "127.0.0.1:50051")),
            enable_ssd_offload=d.get("enable_ssd_offload", False), ssd_offload_path=d.get("ssd_offload_path") or "",
            tenant_id=d.get("tenant_id") or "default",
            enable_client_http_server=d.get("enable_client_http_server", False),
            client_http_port=d.get("client_http_port", 9300), tenant_token=d.get("tenant_token"))

    def _open(self, cfg, disk=None):
        host = cfg.local_hostname
        if host and not _has_port(host) and not host.startswith("["):
            port = _free_port(host)
            if port:
                host = "%s:%d" % (host, port)
        with self._lock:
            if self._h:
                log.error("mooncake: setup: store already set up")
                return ErrorCode.INVALID_PARAMS
            o = {}
            if disk:
                o["disk"] = disk
            if _names_tenant(getattr(cfg, "tenant_id", None)):
                o["tenant_id"] = cfg.tenant_id
            if getattr(cfg, "tenant_token", ""):
                o["token"] = cfg.tenant_token
            if os.environ.get("MOONCAKE_GRANT_KEY_FILE"):  # the master's grant key: segments mount under grants
                o["grant_key_file"] = os.environ["MOONCAKE_GRANT_KEY_FILE"]
            env = {k: os.environ[k] for k in _SETUP_ENV if k in os.environ}
            if env:  # the library's own environment is the one it was loaded with
                o["env"] = env
            opts = json.dumps(o) if o else ""
            h = self._lib.mc_store_open_ex(_native.cstr(host), _native.cstr(cfg.metadata_server),
                                           cfg.global_segment_size, cfg.local_buffer_size, _native.cstr(cfg.protocol),
                                           _native.cstr(cfg.device_name), _native.cstr(cfg.master_server_address),
                                           _native.cstr(opts))
            if h <= 0:
                log.error("mooncake: setup: %s", _native.last_error())
                return int(h) if h < 0 else ErrorCode.INTERNAL_ERROR
            self._h = h
            self._regs = {}
            self.config = cfg
        return 0

    def init_all(self, protocol, device_name, mount_segment_size=16 * 1024 * 1024):
        """Mooncake's older entry point: setup from the environment with these overrides."""
        return self.setup(protocol=protocol, rdma_devices=device_name, global_segment_size=mount_segment_size)

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """Becomes a dummy client of the real client (``mooncake client``) serving
        server_address ("host:port") on this host: every call is served by it, and
        mem_pool_size bytes of memory shared with it back alloc_from_mem_pool (buffers
        there move without a copy). local_buffer_size is accepted for Mooncake's
        signature. Returns 0, or a negative code (no real client there: -1)."""
        with self._lock:
            if self._h:
                log.error("mooncake: setup_dummy: store already set up")
                return ErrorCode.INVALID_PARAMS
            h = self._lib.mc_store_open_dummy(int(mem_pool_size), int(local_buffer_size),
                                              _native.cstr(str(server_address)))
            if h <= 0:
                log.error("mooncake: setup_dummy: %s", _native.last_error())
                return int(h) if h < 0 else ErrorCode.INTERNAL_ERROR
            self._h = h
            self._regs = {}
            self.config = None
        return 0

    def alloc_from_mem_pool(self, size):
        """size bytes of a dummy client's shared pool: the address, 0 when this is not a
        dummy client or the pool is used up."""
        if not self._h:
            log.error("mooncake: alloc_from_mem_pool: store not set up")
            return 0
        p = self._lib.mc_store_alloc_from_pool(self._h, int(size))
        if not p:
            log.error("mooncake: alloc_from_mem_pool: %s", _native.last_error())
            return 0
        return int(p)

    def close(self):
        """Unmounts this client's segment and disconnects. Returns 0."""
        with self._lock:
            h, self._h = self._h, 0
            self._regs = {}
            self._put_sessions, self._get_sessions = {}, {}  # sessions end with the client
        if not h:
            return 0
        rc = self._lib.mc_store_close(h)
        if rc < 0:
            log.error("mooncake: close: %s", _native.last_error())
            return int(rc)
        return 0

    def health_check(self):
        """0 when the master answers, 1 when not set up, 2 when the master is unreachable."""
        if not self._h:
            return HC_NOT_INITIALIZED
        rc = self._lib.mc_store_health(self._h)
        if rc < 0:
            log.error("mooncake: health_check: %s", _native.last_error())
            return HC_MASTER_UNREACHABLE
        return HC_HEALTHY

    def get_hostname(self):
        """This client's "host:port": its local_hostname (its segment's name), as Mooncake returns it,
        also when that port was taken and the transfer engine runs on another; "" before setup."""
        if not self._h:
            return ""
        buf = ctypes.create_string_buffer(512)
        n = self._lib.mc_store_hostname(self._h, buf, len(buf))
        if n < 0:
            return self.config.local_hostname if self.config else ""
        return buf.value.decode("utf-8", "replace")
