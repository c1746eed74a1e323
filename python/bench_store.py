#!/usr/bin/env python3
"""Store batch benchmark from Python: batch_put_from / batch_get_into of 32 values
of 1 MiB through MooncakeDistributedStore, as a ratio of the Go store client's
BatchPut / BatchGetInto of the same batch (cmd/bench_store_go), measured in
the same run against the same master and storage node. It also times the Go
client's per-key PutFrom/GetInto from registered buffers, 8 at a time: what the
binding runs below cgo, so python / go-per-key is the cost of Python and cgo alone.

    make python build && PYTHONPATH=python /usr/bin/python3 python/bench_store.py

The script starts a `mooncake master` and a `mooncake store` node (--segment-size),
then alternates Go and Python runs for --rounds rounds (the machine may be shared).
Each run times --iters batches (after one warm-up batch) with fresh keys, removing
them untimed after each batch; the best batch of each run counts and the best run
of each side is the headline (the median per-round ratio is printed next to it).
Python's buffers are registered with register_buffer (sent and received in place).
Prints a summary line and, with --json, one JSON object.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from mooncake.store import MooncakeDistributedStore  # noqa: E402


def mooncake_bin():
    return os.environ.get("MOONCAKE_BIN") or os.path.join(ROOT, "bin", "mooncake")


def start(argv, ready):
    """Starts argv and waits for a stdout line containing ready; returns (proc, line)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if ready in line:
            return p, line
    p.kill()
    raise RuntimeError("%s did not start" % argv[:2])


def go_binary():
    path = os.environ.get("MOONCAKE_BENCH_STORE_GO") or os.path.join(ROOT, "bin", "bench_store_go")
    if not os.path.exists(path):
        subprocess.check_call([os.environ.get("GO", "go"), "build", "-o", path, "./cmd/bench_store_go"], cwd=ROOT)
    return path


def go_run(args, master, rnd, per_key=False):
    out = subprocess.check_output([go_binary(), "--master", master, "--batch", str(args.batch), "--size",
                                   str(args.size), "--iters", str(args.iters), "--transport", args.transport,
                                   "--prefix", "bench-go/%d/%d" % (rnd, per_key), "--per-key=%s" % str(per_key).lower()],
                                  text=True)
    return json.loads(out.strip().splitlines()[-1])


def python_run(args, master, rnd):
    import numpy as np
    s = MooncakeDistributedStore()
    if s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 << 20, args.transport, "", master) != 0:
        raise RuntimeError("setup failed")
    n, size = args.batch, args.size
    src = (np.arange(n * size, dtype=np.uint64) * 31).astype(np.uint8)
    dst = np.zeros(n * size, dtype=np.uint8)
    try:
        for buf in (src, dst):
            if s.register_buffer(buf.ctypes.data, buf.nbytes) != 0:
                raise RuntimeError("register_buffer failed")
        sp = [src.ctypes.data + i * size for i in range(n)]
        dp = [dst.ctypes.data + i * size for i in range(n)]
        sizes = [size] * n
        best_put = best_get = None
        for it in range(args.iters + 1):
            keys = ["bench-py/%d/%d/%d" % (rnd, it, i) for i in range(n)]
            t0 = time.perf_counter()
            res = s.batch_put_from(keys, sp, sizes)
            tp = time.perf_counter() - t0
            if any(r != 0 for r in res):
                raise RuntimeError("batch_put_from: %s" % res)
            t0 = time.perf_counter()
            got = s.batch_get_into(keys, dp, sizes)
            tg = time.perf_counter() - t0
            if any(g != size for g in got):
                raise RuntimeError("batch_get_into: %s" % got)
            if it == 0:
                if not np.array_equal(src[:4096], dst[:4096]):
                    raise RuntimeError("data mismatch")
            else:
                best_put = tp if best_put is None else min(best_put, tp)
                best_get = tg if best_get is None else min(best_get, tg)
            s.batch_remove(keys, force=True)
        total = n * size
        return {"put_gbps": total / best_put / 1e9, "get_gbps": total / best_get / 1e9, "batches": args.iters}
    finally:
        s.unregister_buffer(src.ctypes.data)
        s.unregister_buffer(dst.ctypes.data)
        s.close()


def main():
    from mooncake.config import parse_size
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=parse_size, default=1 << 20)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transport", default="tcp", help="tcp (default), shm or auto, for both sides and the node")
    ap.add_argument("--segment-size", default="1GiB")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    go_binary()
    master, line = start([mooncake_bin(), "master", "--host", "127.0.0.1", "--port", "0", "--http-port", "-1"],
                         "master listening")
    node = None
    try:
        if "grpc=" not in line:  # the address is logged on stderr by some versions; ask for stdout
            raise RuntimeError("no master address in %r" % line)
        addr = line.split("grpc=", 1)[1].split()[0]
        node, _ = start([mooncake_bin(), "store", "--master", addr, "--segment-size", args.segment_size,
                         "--http-port", "-1", "--transport", args.transport], "mounted")
        go, gk, py = [], [], []
        for rnd in range(args.rounds):
            go.append(go_run(args, addr, rnd))
            py.append(python_run(args, addr, rnd))
            gk.append(go_run(args, addr, rnd, per_key=True))
        res = {"batch": args.batch, "size": args.size, "transport": args.transport}
        for op in ("put", "get"):
            g = max(r[op + "_gbps"] for r in go)
            p = max(r[op + "_gbps"] for r in py)
            k = max(r[op + "_gbps"] for r in gk)
            res[op] = {"go_gbps": round(g, 3), "go_per_key_gbps": round(k, 3), "python_gbps": round(p, 3),
                       "ratio": round(p / g, 3), "ratio_to_go_per_key": round(p / k, 3),
                       "median_round_ratio": round(statistics.median(
                           pr[op + "_gbps"] / gr[op + "_gbps"] for pr, gr in zip(py, go)), 3)}
        for op in ("put", "get"):
            r = res[op]
            print("batch_%s: python %.2f GB/s, go %.2f GB/s, ratio %.2f (median round %.2f); "
                  "go per key %.2f GB/s (python/go per key %.2f)" % (
                      "put_from" if op == "put" else "get_into", r["python_gbps"], r["go_gbps"], r["ratio"],
                      r["median_round_ratio"], r["go_per_key_gbps"], r["ratio_to_go_per_key"]))
        if args.json:
            print(json.dumps(res))
        return 0
    finally:
        for p in (node, master):
            if p is not None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    sys.exit(main())
