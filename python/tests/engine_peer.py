"""A second Python process with its own TransferEngine, driven by JSON lines.

Prints {"session", "addr", "len", "rpc_port"} once ready, then answers commands
on stdin, one JSON object per line:

  {"op": "sha", "off": o, "len": n}          -> {"sha": hex of buf[o:o+n]}
  {"op": "fill", "off": o, "len": n, "seed": s} -> {"ok": true}  (random bytes)
  {"op": "notifies"}                          -> {"notifies": [[from, name, msg], ...]}
  {"op": "write", "target": session, "addr": a, "off": o, "len": n} -> {"rc": rc}
  {"op": "read", "target": session, "addr": a, "off": o, "len": n}  -> {"rc": rc}
  {"op": "first", "segment": name}            -> {"addr": get_first_buffer_address(name)}
  {"op": "probe", "target": session}          -> {"rc": send_probe(target)}
It exits when stdin closes. Arguments: buffer size, protocol, metadata server.
"""

import hashlib
import json
import sys

import numpy as np

from mooncake.engine import TransferEngine


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 8 << 20
    protocol = sys.argv[2] if len(sys.argv) > 2 else "tcp"
    metadata = sys.argv[3] if len(sys.argv) > 3 else "P2PHANDSHAKE"
    eng = TransferEngine()
    if eng.initialize("127.0.0.1", metadata, protocol, "") != 0:
        print(json.dumps({"error": "initialize failed"}), flush=True)
        return 1
    buf = np.zeros(size, dtype=np.uint8)
    addr = buf.ctypes.data
    if eng.register_memory(addr, size) != 0:
        print(json.dumps({"error": "register failed"}), flush=True)
        return 1
    print(json.dumps({"session": eng.get_session_id(), "addr": addr, "len": size,
                      "rpc_port": eng.get_rpc_port()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "sha":
            o, n = cmd["off"], cmd["len"]
            out = {"sha": hashlib.sha256(buf[o:o + n].tobytes()).hexdigest()}
        elif op == "fill":
            o, n = cmd["off"], cmd["len"]
            buf[o:o + n] = np.random.default_rng(cmd["seed"]).integers(0, 256, n, dtype=np.uint8)
            out = {"ok": True}
        elif op == "notifies":
            out = {"notifies": [list(x) for x in eng.get_notifies()]}
        elif op == "write":
            o, n = cmd["off"], cmd["len"]
            out = {"rc": eng.transfer_sync_write(cmd["target"], addr + o, cmd["addr"], n)}
        elif op == "read":
            o, n = cmd["off"], cmd["len"]
            out = {"rc": eng.transfer_sync_read(cmd["target"], addr + o, cmd["addr"], n)}
        elif op == "first":
            out = {"addr": eng.get_first_buffer_address(cmd["segment"])}
        elif op == "probe":
            out = {"rc": eng.send_probe(cmd["target"])}
        else:
            out = {"error": "unknown op %r" % op}
        print(json.dumps(out), flush=True)
    eng.unregister_memory(addr)
    eng.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
