"""A rank of test_shared_segment: joins a gloo group of 2 (argv: rank, port, rows of block k),
creates the shared segment, and answers JSON commands on stdin: write / read / barrier."""

import json
import sys

import torch
import torch.distributed as dist

from mooncake.shared_segment import SharedSegmentError, create_shared_segment

rank, port, shape = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, world_size=2, rank=rank)
try:
    seg = create_shared_segment("t", {"k": dict(count=2, shape=(shape, 3), dtype=torch.float32),
                                      "v": dict(count=2, shape=(5,), dtype=torch.int64)},
                                world_size=2, rank_id=rank, comm_group=dist.group.WORLD)
except SharedSegmentError as exc:  # every rank raises when one fails
    print(json.dumps({"error": str(exc)}), flush=True)
    sys.exit(0)
print(json.dumps({"ready": True, "size": seg.total_size()}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "write":
        seg.tensors("k")[1].fill_(float(cmd["value"]))
        seg.tensors("v")[0][:] = torch.arange(5) * int(cmd["value"])
        out = {"ok": True}
    elif cmd["op"] == "read":
        out = {"k": seg.tensors("k")[1].sum().item(), "v": seg.tensors("v")[0].tolist(),
               "k0": seg.tensors("k")[0].sum().item()}
    else:
        dist.barrier()
        out = {"ok": True}
    print(json.dumps(out), flush=True)
