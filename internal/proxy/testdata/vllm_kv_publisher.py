"""A KV event publisher shaped like vLLM's (vllm/distributed/kv_events.py),
written for our tests with Debian's python3-zmq and python3-msgpack.

PUB socket: [topic, seq (8 bytes big-endian), msgpack EventBatch].
ROUTER replay socket: a request [identity, b"", start seq] gets every
buffered batch from start on as [identity, b"", seq, payload], then
[identity, b"", -1 (8 bytes), b""].

Usage: vllm_kv_publisher.py ENCODING TOKENS_JSON
  ENCODING: "array" (older vLLM: array_like structs, int hashes) or
            "map" (newer vLLM: tagged maps, bytes hashes).
  TOKENS_JSON: the prompt's token ids; blocks of 16 are announced as
            stored: block 0 in batch 1, the rest (parent = block 0) in
            batch 2. Batch 0 clears the cache.
Batch 1 is NOT sent on PUB (a lost message): only the replay socket has
it. After the script, an empty batch is published every 50 ms, so a
subscriber that joined late sees a sequence number and asks for replay.
Prints "ready PUB_PORT REPLAY_PORT" once bound.
"""

import json
import sys
import time

import msgpack
import zmq

BS = 16
encoding, tokens = sys.argv[1], json.loads(sys.argv[2])
nblocks = len(tokens) // BS


def h(i):
    if encoding == "array":
        return 1000003 * (i + 1)  # vLLM's older int hashes
    return (b"blockhash-%04d" % i) + bytes(18)  # 32 bytes, like sha256


def stored(first, last, parent):
    hashes = [h(i) for i in range(first, last)]
    toks = tokens[first * BS:last * BS]
    if encoding == "array":
        return ["BlockStored", hashes, parent, toks, BS, None, "GPU"]
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
            "token_ids": toks, "block_size": BS, "lora_id": None, "medium": "GPU",
            "lora_name": None}


def cleared():
    return ["AllBlocksCleared"] if encoding == "array" else {"type": "AllBlocksCleared"}


def batch(events):
    if encoding == "array":
        return msgpack.packb([time.time(), events, 0], use_bin_type=True)
    return msgpack.packb({"ts": time.time(), "events": events, "data_parallel_rank": 0}, use_bin_type=True)


ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
router = ctx.socket(zmq.ROUTER)
replay_port = router.bind_to_random_port("tcp://127.0.0.1")
print("ready %d %d" % (pub_port, replay_port), flush=True)

buffer = []
script = [
    (batch([cleared()]), True),
    (batch([stored(0, 1, None)]), False),  # lost on PUB
    (batch([stored(1, nblocks, h(0))]), True),
]
seq = 0


def publish(payload, send):
    global seq
    sb = seq.to_bytes(8, "big")
    if send:
        pub.send_multipart([b"kv@test@tiny", sb, payload])
    buffer.append((seq, payload))
    seq += 1


for payload, send in script:
    publish(payload, send)

poller = zmq.Poller()
poller.register(router, zmq.POLLIN)
while True:
    for sock, _ in poller.poll(50):
        ident, _, start = router.recv_multipart()
        start = int.from_bytes(start, "big")
        for s, payload in buffer:
            if s >= start:
                router.send_multipart([ident, b"", s.to_bytes(8, "big"), payload])
        router.send_multipart([ident, b"", (-1).to_bytes(8, "big", signed=True), b""])
    publish(batch([]), True)
