"""Mooncake's command names as thin entry points onto the ``mooncake`` binary.

``mooncake_master``, ``mooncake_client``, ``mooncake_http_metadata_server`` and
``transfer_engine_bench`` accept Mooncake's gflags-style arguments
(``--port=50051``, ``--port 50051``, ``--enable_http_metadata_server``,
``--noenable_http_metadata_server``) and run ``mooncake master``, ``mooncake
client``, ``mooncake metadata-server`` and ``mooncake bench transfer`` with the
equivalent flags. ``mooncake_master`` hands Mooncake's master flags to
``mooncake master`` as they are (it takes them all, the embedded HTTP
metadata server included, and warns about the ones without effect here). Flags
with no counterpart are reported on stderr and ignored. The wheel installs
these as console scripts (and ``mooncake``, the binary itself); in a checkout
the wrappers in ``python/bin/`` call them. The binary is ``$MOONCAKE_BIN``,
else the one bundled in the wheel (``mooncake/_bin/mooncake``), else
``mooncake`` on ``PATH``, else the repository's ``bin/mooncake``.
"""

import os
import shutil
import signal
import subprocess
import sys

__all__ = ["parse_gflags", "master_argv", "master_passthrough_argv", "mooncake_main", "client_argv", "metadata_server_argv", "bench_argv", "master_main",
           "client_main", "main", "http_metadata_server_main", "transfer_engine_bench_main", "mooncake_binary"]


def mooncake_binary():
    """Path of the mooncake binary."""
    env = os.environ.get("MOONCAKE_BIN")
    if env:
        return env
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "mooncake")
    if os.access(bundled, os.X_OK):
        return bundled
    found = shutil.which("mooncake")
    if found:
        return found
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(os.path.dirname(here)), "bin", "mooncake")


def parse_gflags(args):
    """{name: value} from gflags-style arguments; a bare --flag is "true", --noflag is "false"."""
    flags = {}
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if not a.startswith("-") or a in ("-", "--"):
            raise ValueError("unexpected argument %r (flags look like --name=value)" % a)
        body = a.lstrip("-")
        if "=" in body:
            name, value = body.split("=", 1)
        elif i < len(args) and not args[i].startswith("-"):
            name, value = body, args[i]
            i += 1
        elif body.startswith("no") and len(body) > 2:
            name, value = body[2:], "false"
        else:
            name, value = body, "true"
        flags[name.replace("-", "_")] = value
    return flags


def _true(v):
    return str(v).strip().lower() in ("1", "true", "yes", "on", "t", "y")


def _seconds(v):
    return "%ss" % v


def _millis(v):
    return "%sms" % v


def _note(cmd, ignored):
    for name in sorted(ignored):
        sys.stderr.write("%s: flag --%s has no counterpart here; ignored\n" % (cmd, name))


# gflag -> (our flag, value converter or None for a boolean switch)
_MASTER = {
    "port": ("--port", str),
    "rpc_port": ("--port", str),
    "rpc_address": ("--host", str),
    "rpc_bind_address": ("--host", str),
    "metrics_port": ("--http-port", str),
    "http_port": ("--http-port", str),
    "eviction_high_watermark_ratio": ("--eviction-high-watermark", str),
    "eviction_ratio": ("--eviction-ratio", str),
    "default_kv_lease_ttl": ("--lease-ttl", _millis),
    "client_ttl": ("--client-ttl", _seconds),
    "put_start_discard_timeout_sec": ("--put-timeout", _seconds),
    "put_start_release_timeout_sec": ("--put-release-timeout", _seconds),
    "enable_ha": ("--ha", None),
    "etcd_endpoints": ("--etcd", str),
    "cluster_id": ("--cluster", str),
    "allocation_strategy": ("--strategy", str),
}
_MASTER_META = ("enable_http_metadata_server", "http_metadata_server_port", "http_metadata_server_host")
# Mooncake's master-side disk tier flags: here the tier belongs to the client or node.
_MASTER_DISK = ("root_fs_dir", "enable_offload", "offload_on_evict", "promotion_on_hit",
                "promotion_admission_threshold")


def _translate(table, flags, cmd):
    argv, ignored = [], []
    for name, value in flags.items():
        if name in ("v", "verbose"):
            if str(value).strip().lower() not in ("0", "false", "no", "off"):
                argv.append("-v")
            continue
        m = table.get(name)
        if m is None:
            ignored.append(name)
            continue
        flag, conv = m
        if conv is None:
            if _true(value):
                argv.append(flag)
        else:
            argv += [flag, conv(value)]
    _note(cmd, ignored)
    return argv


def master_argv(flags):
    """(master argv, metadata-server argv or None) for mooncake_master's flags."""
    rest = {k: v for k, v in flags.items() if k not in _MASTER_META and k not in _MASTER_DISK}
    disk = sorted(k for k in flags if k in _MASTER_DISK)
    if disk:
        sys.stderr.write("mooncake_master: %s: the disk tier is configured where the memory is, not on the "
                         "master: setup(..., enable_ssd_offload=True, ssd_offload_path=DIR) in a client, or "
                         "`mooncake store --root-fs-dir DIR --enable-offload` for a storage node; ignored here\n"
                         % ", ".join("--" + k for k in disk))
    argv = ["master"] + _translate(_MASTER, rest, "mooncake_master")
    meta = None
    if _true(flags.get("enable_http_metadata_server", "false")):
        meta = ["metadata-server", "--port", str(flags.get("http_metadata_server_port", "8080")),
                "--host", str(flags.get("http_metadata_server_host", "0.0.0.0"))]
    return argv, meta


_CLIENT = {
    "master_server_address": ("--master", str),
    "master_server_addr": ("--master", str),
    "port": ("--port", str),
    "host": ("--host", str),
    "local_hostname": ("--host", str),
    "global_segment_size": ("--segment-size", str),
    "local_buffer_size": ("--local-buffer-size", str),
}


def client_argv(flags):
    """mooncake client argv for mooncake_client's flags: a store client that contributes
    memory to the pool and serves the dummy clients of this host at host:port."""
    flags = dict(flags)
    proto = str(flags.pop("protocol", "tcp")).lower()
    for name in ("metadata_server", "device_names", "rdma_devices", "threads", "start_offload_rpc_server"):
        flags.pop(name, None)  # handled by the client itself or not applicable
    offload = _true(flags.pop("enable_offload", "false"))
    argv = ["client"] + _translate(_CLIENT, flags, "mooncake_client")
    argv += ["--transport", proto if proto in ("tcp", "shm", "auto") else "tcp"]
    if offload:
        # Mooncake's real client takes its SSD offload settings from the environment.
        env = os.environ
        argv += ["--enable-offload", "--root-fs-dir", env.get("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH") or "/data/file_storage",
                 "--disk-capacity", env.get("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES") or str(2 << 40)]
    return argv


def metadata_server_argv(flags):
    """mooncake metadata-server argv for mooncake_http_metadata_server's flags."""
    argv = ["metadata-server", "--port", str(flags.pop("port", "8080")), "--host", str(flags.pop("host", "0.0.0.0"))]
    flags.pop("log_level", None)
    _note("mooncake_http_metadata_server", flags)
    return argv


_BENCH = {
    "mode": ("--mode", str),
    "segment_id": ("--target", str),
    "protocol": ("--transport", lambda v: v if v in ("tcp", "shm", "inproc") else "tcp"),
    "operation": ("--op", str),
    "block_size": ("--block-size", str),
    "batch_size": ("--batch-size", str),
    "threads": ("--threads", str),
    "duration": ("--duration", _seconds),
    "buffer_size": ("--buffer-size", str),
}


def bench_argv(flags):
    """mooncake bench transfer argv for transfer_engine_bench's flags."""
    flags = dict(flags)
    for name in ("metadata_server", "local_server_name", "device_name", "nic_priority_matrix", "gpu_id",
                 "use_vram", "auto_discovery"):
        flags.pop(name, None)
    return ["bench", "transfer"] + _translate(_BENCH, flags, "transfer_engine_bench")


def _run(argvs):
    """Runs the mooncake processes, forwards SIGINT/SIGTERM, returns the first one's exit code."""
    binary = mooncake_binary()
    procs, asked = [], []

    def stop(signum, frame):
        asked.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    # The handlers come first: a signal that arrives while the children start is forwarded
    # to them, instead of killing this process and leaving them orphaned.
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, stop)
    for a in argvs:
        procs.append(subprocess.Popen([binary] + a))
        if asked:
            procs[-1].send_signal(asked[0])
    rc = procs[0].wait()
    for p in procs[1:]:
        if p.poll() is None:
            p.terminate()
        p.wait()
    return rc


def _main(build, args):
    try:
        flags = parse_gflags(sys.argv[1:] if args is None else args)
        argvs = build(flags)
    except ValueError as exc:
        sys.stderr.write("%s\n" % exc)
        return 2
    return _run(argvs)


def master_passthrough_argv(args):
    """``mooncake master`` argv for mooncake_master's arguments: gflags'
    spellings the Go flag parser lacks (``-flag=value`` with one dash,
    ``--noflag``) are rewritten, everything else is passed as it is."""
    out = []
    for a in args:
        if a.startswith("-") and not a.startswith("--") and len(a) > 2:
            a = "-" + a  # gflags takes -flag=value too
        name = a[2:].split("=", 1)[0] if a.startswith("--") else ""
        if name.startswith("no") and "=" not in a and name[2:] in _MASTER_BOOLS:
            a = "--%s=false" % name[2:]
        out.append(a)
    return ["master"] + out


# Mooncake's boolean master flags (for --noflag).
_MASTER_BOOLS = frozenset((
    "enable_http_metadata_server", "enable_ha", "enable_metric_reporting", "enable_offload", "offload_on_evict",
    "promotion_on_hit", "enable_kv_events", "allow_evict_soft_pinned_objects", "rpc_enable_tcp_no_delay",
    "offload_force_evict", "enable_disk_eviction", "enable_oplog", "enable_snapshot", "enable_snapshot_restore",
    "enable_multi_tenants", "enable_metadata_cleanup_on_timeout", "enable_cxl", "kv_events_emit_legacy_compat",
    "kv_events_emit_object_key"))


def master_main(args=None):
    """mooncake_master: ``mooncake master`` with Mooncake's master flags (the HTTP metadata
    server of --enable_http_metadata_server runs in the master's process)."""
    return _run([master_passthrough_argv(sys.argv[1:] if args is None else list(args))])


def mooncake_main(args=None):
    """mooncake: this project's binary (bundled in the wheel), with the arguments as given."""
    return _run([sys.argv[1:] if args is None else list(args)])


# Mooncake's mooncake.cli.main runs mooncake_master.
main = master_main


def client_main(args=None):
    """mooncake_client: a process that contributes memory to the store (``mooncake store``)."""
    return _main(lambda f: [client_argv(f)], args)


def http_metadata_server_main(args=None):
    """mooncake_http_metadata_server: the HTTP metadata server."""
    return _main(lambda f: [metadata_server_argv(f)], args)


def transfer_engine_bench_main(args=None):
    """transfer_engine_bench: the transfer engine benchmark."""
    return _main(lambda f: [bench_argv(f)], args)
