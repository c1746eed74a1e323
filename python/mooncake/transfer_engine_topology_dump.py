"""mooncake.transfer_engine_topology_dump: print the local transfer engine topology.

Mooncake's tool prints the NICs and memory devices its engine discovers (RDMA NICs ranked per
memory location). This engine has no NICs to discover (TCP and shared memory need none), so
what it prints is the engine's own view: a started engine's segment (name, RPC port,
registered buffers) with the classic backend, and TENT's (``mooncake.tent``) with
``--backend tent``. The flags are Mooncake's; ``--device-name`` and the custom-topology flags
are accepted and have nothing to filter or override.
"""

import argparse
import json
import os
import sys
import tempfile

__all__ = ["parse_args", "resolve_backend", "apply_backend", "sanitize_tent_conf_for_discover", "dump_te_topology",
           "dump_tent_topology", "main"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Dump the local transfer engine topology (classic engine or TENT).",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device-name", type=str, default="", help="device filter (nothing to filter here)")
    p.add_argument("--backend", choices=("auto", "te", "tent"), default="auto",
                   help="te: mooncake.engine, tent: mooncake.tent, auto: tent when MC_USE_TENT/MC_USE_TEV1 is set")
    p.add_argument("--use-custom-topo", action="store_true", help="keep custom topology overrides")
    p.add_argument("--custom-topo-json", type=str, default=None, help="custom topology JSON (MC_CUSTOM_TOPO_JSON)")
    return p.parse_args(argv)


def resolve_backend(backend):
    if backend == "auto":
        return "tent" if (os.environ.get("MC_USE_TENT") or os.environ.get("MC_USE_TEV1")) else "te"
    return backend


def apply_backend(backend):
    if backend == "tent":
        os.environ.setdefault("MC_USE_TENT", "1")
    else:
        os.environ.pop("MC_USE_TENT", None)
        os.environ.pop("MC_USE_TEV1", None)


def sanitize_tent_conf_for_discover():
    """Writes MC_TENT_CONF without topology/priority_matrix and topology/custom_json_path to a
    temporary file and points MC_TENT_CONF at it; returns its path (the caller removes it), or
    None when there was nothing to remove."""
    conf = os.environ.get("MC_TENT_CONF", "")
    data = None
    if conf:
        try:
            if os.path.isfile(conf):
                with open(conf, encoding="utf-8") as f:
                    data = json.load(f)
            else:
                data = json.loads(conf)
        except (OSError, ValueError):
            data = None
    topo = data.get("topology") if isinstance(data, dict) else None
    if not isinstance(topo, dict) or not ({"priority_matrix", "custom_json_path"} & set(topo)):
        return None
    clean = dict(data)
    clean["topology"] = {k: v for k, v in topo.items() if k not in ("priority_matrix", "custom_json_path")}
    fd, path = tempfile.mkstemp(prefix="tent-topo-dump-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(clean, f)
    os.environ["MC_TENT_CONF"] = path
    return path


def dump_te_topology(device_name):
    from mooncake.engine import TransferEngine

    engine = TransferEngine()
    if engine.initialize(os.environ.get("MC_LOCAL_HOSTNAME", "127.0.0.1"), "P2PHANDSHAKE", "tcp", device_name) != 0:
        raise RuntimeError("cannot start a transfer engine")
    try:
        return engine.get_local_topology(device_name=device_name or None)
    finally:
        engine.close()


def dump_tent_topology(device_name):
    from mooncake import tent

    engine = tent.TransferEngine()
    try:
        if not engine.available():
            raise RuntimeError("tent.TransferEngine is not available")
        return engine.get_local_topology()
    finally:
        engine.close()


def main(argv=None):
    args = parse_args(argv)
    backend = resolve_backend(args.backend)
    apply_backend(backend)
    temp = None
    if args.custom_topo_json is not None:
        mode = "custom (%s)" % args.custom_topo_json
    elif args.use_custom_topo:
        mode = "custom (%s)" % (os.environ.get("MC_CUSTOM_TOPO_JSON") or "MC_TENT_CONF topology")
    else:
        mode = "discover"
        if backend == "tent":
            temp = sanitize_tent_conf_for_discover()
    try:
        topo = dump_tent_topology(args.device_name) if backend == "tent" else dump_te_topology(args.device_name)
        print("Local topology [%s/%s]: %s" % (backend, mode, topo))
        return 0
    except Exception as exc:
        print("error: failed to dump topology: %s" % exc, file=sys.stderr)
        return 1
    finally:
        if temp and os.path.exists(temp):
            os.unlink(temp)


if __name__ == "__main__":
    sys.exit(main())
