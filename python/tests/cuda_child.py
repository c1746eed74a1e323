"""Child process of test_cuda.py: runs one GPU scenario with the CUDA driver
of $MOONCAKE_CUDA_LIB (the simulated one in CI, whose device memory the host
cannot touch) and exits 0 after printing OK, non-zero on any failure.

Scenarios: trap (reads device memory from the host: must die of SIGSEGV),
engine (vLLM's P/D path: register KV caches in device memory, write blocks
device -> remote device, read back, *_on_cuda, write/read_bytes on device
memory), store MASTER (put_from/get_into/batches/tensors with device
buffers), torch MASTER (the same with torch CUDA tensors; real GPUs only).
"""

import ctypes
import os
import random
import sys

from mooncake import _cuda
from mooncake import engine as me
from mooncake.engine import TransferEngine
from mooncake.store import MooncakeDistributedStore

SECOND = int(os.environ.get("CUDA_SECOND_DEVICE", "0"))


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def rnd(n, seed):
    return random.Random(seed).randbytes(n)


def trap():
    p = _cuda.alloc(4096)
    check(p, "alloc")
    print("reading device memory from the host", flush=True)
    ctypes.string_at(p, 1)
    print("read device memory without a fault", flush=True)
    sys.exit(0)


def engine():
    check(me.SUPPORT_CUDA is True, "SUPPORT_CUDA")
    for proto in ("tcp", "auto"):
        pre, dec = TransferEngine(), TransferEngine()
        check(pre.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "") == 0, "initialize prefill")
        check(dec.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "") == 0, "initialize decode")
        layers, blocks, block = 4, 16, 16 << 10
        n = layers * blocks * block
        pkv, dkv = _cuda.alloc(n, 0), _cuda.alloc(n, SECOND)
        check(pkv and dkv, "alloc KV caches")
        check(_cuda.device_of(pkv) == 0 and _cuda.device_of(dkv) == SECOND, "device_of")
        check(pre.register_memory(pkv, n) == 0 and dec.register_memory(dkv, n) == 0, "register KV caches")
        kv = rnd(n, 1)
        _cuda.from_host(pkv, kv)
        _cuda.from_host(dkv, bytes(n))
        target = dec.get_session_id()
        want = bytearray(n)
        for layer in range(layers):
            srcs, dsts, lens = [], [], []
            for i in range(blocks):
                s = (layer * blocks + i) * block
                d = (layer * blocks + (i * 5 + 3) % blocks) * block
                srcs.append(pkv + s)
                dsts.append(dkv + d)
                lens.append(block)
                want[d:d + block] = kv[s:s + block]
            check(pre.batch_transfer_sync_write(target, srcs, dsts, lens) == 0, "%s: write layer %d" % (proto, layer))
        check(_cuda.to_host(dkv, n) == bytes(want), "%s: decode KV differs byte for byte" % proto)
        # read it back into the prefill cache
        _cuda.from_host(pkv, bytes(n))
        check(pre.batch_transfer_sync_read(target, [pkv], [dkv], [n]) == 0, "%s: read back" % proto)
        check(_cuda.to_host(pkv, n) == bytes(want), "%s: read back differs" % proto)
        # stream-ordered forms (default stream)
        _cuda.from_host(pkv, kv)
        check(pre.transfer_write_on_cuda(target, pkv, dkv, block, 0) is None, "transfer_write_on_cuda")
        check(pre.batch_transfer_read_on_cuda(target, [pkv + block], [dkv], [block], 0) is None, "read_on_cuda")
        check(_cuda.to_host(pkv + block, block) == kv[:block], "%s: on_cuda bytes" % proto)
        # write/read_bytes on registered device memory
        check(dec.write_bytes_to_buffer(dkv + 100, b"hello gpu", 9) == 0, "write_bytes_to_buffer")
        check(dec.read_bytes_from_buffer(dkv + 100, 9) == b"hello gpu", "read_bytes_from_buffer")
        check(pre.unregister_memory(pkv) == 0 and dec.unregister_memory(dkv) == 0, "unregister")
        pre.close()
        dec.close()
        _cuda.free(pkv, 0)
        _cuda.free(dkv, SECOND)


def _store(master):
    s = MooncakeDistributedStore()
    check(s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", master) == 0, "store setup")
    return s


def store(master):
    try:
        import numpy as np
    except ImportError:
        np = None
    s = _store(master)
    n = 1 << 20
    buf, out = _cuda.alloc(n), _cuda.alloc(n)
    check(s.register_buffer(buf, n) == 0 and s.register_buffer(out, n) == 0, "register_buffer of device memory")
    v = rnd(300000, 2)
    _cuda.from_host(buf, v)
    check(s.put_from("dev", buf, len(v)) == 0, "put_from device")
    check(s.get("dev") == v, "host get of a device put")
    h = rnd(5000, 3)
    check(s.put("host", h) == 0, "put host")
    check(s.get_into("host", out, n) == len(h), "get_into device")
    check(_cuda.to_host(out, len(h)) == h, "device copy of a host put")
    check(s.get_into("dev", out, n) == len(v) and _cuda.to_host(out, len(v)) == v, "device -> device")
    # batches of blocks of one device buffer
    blk = 64 << 10
    blocks = rnd(4 * blk, 4)
    _cuda.from_host(buf, blocks)
    keys = ["b%d" % i for i in range(4)]
    check(s.batch_put_from(keys, [buf + i * blk for i in range(4)], [blk] * 4) == [0] * 4, "batch_put_from")
    got = s.batch_get_into(keys, [out + (3 - i) * blk for i in range(4)], [blk] * 4)
    check(list(got) == [blk] * 4, "batch_get_into: %s" % list(got))
    back = _cuda.to_host(out, 4 * blk)
    for i in range(4):
        check(back[(3 - i) * blk:(4 - i) * blk] == blocks[i * blk:(i + 1) * blk], "batch block %d" % i)
    # tensor objects read into a device buffer (a host copy without torch CUDA)
    if np is None:
        print("numpy not installed: tensor checks skipped")
        s.close()
        return
    arr = np.arange(1000, dtype=np.float32)
    check(s.put_tensor("t", arr) == 0, "put_tensor")
    t = s.get_tensor_into("t", out, n)
    check(t is not None and np.array_equal(np.asarray(t.cpu() if hasattr(t, "cpu") else t), arr), "get_tensor_into")
    check(s.put_tensor_from("t2", out, s.get_into("t", out, n)) == 0, "put_tensor_from device")
    check(np.array_equal(np.asarray(s.get_tensor("t2")), arr), "tensor round trip through device memory")
    check(s.unregister_buffer(buf) == 0 and s.unregister_buffer(out) == 0, "unregister_buffer")
    s.close()


def torch_cuda(master):
    import torch
    check(torch.cuda.is_available(), "torch CUDA")
    s = _store(master)
    x = torch.randn(256, 1024, device="cuda")
    check(s.put_tensor("x", x) == 0, "put_tensor(cuda)")
    y = torch.empty_like(x)
    check(s.get_tensor_into_cuda("x", y) == x.numel() * 4, "get_tensor_into_cuda")
    check(torch.equal(x, y), "get_tensor_into_cuda bytes")
    size = 4 << 20
    raw = torch.empty(size, dtype=torch.uint8, device="cuda")
    t = s.get_tensor_into("x", raw.data_ptr(), size)
    check(t is not None and t.is_cuda and torch.equal(t, x), "get_tensor_into a CUDA buffer is a CUDA tensor")
    s.close()
    # vLLM's path with torch-allocated KV caches
    pre, dec = TransferEngine(), TransferEngine()
    check(pre.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, "init")
    check(dec.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, "init")
    pk = torch.randint(0, 255, (8, 1 << 20), dtype=torch.uint8, device="cuda")
    dk = torch.zeros_like(pk)
    check(pre.register_memory(pk.data_ptr(), pk.numel()) == 0, "register torch KV")
    check(dec.register_memory(dk.data_ptr(), dk.numel()) == 0, "register torch KV")
    rows = list(range(8))
    check(pre.batch_transfer_sync_write(dec.get_session_id(), [pk[i].data_ptr() for i in rows],
                                        [dk[7 - i].data_ptr() for i in rows], [1 << 20] * 8) == 0, "P/D write")
    check(torch.equal(dk.flip(0), pk), "P/D KV equal")
    stream = torch.cuda.Stream()
    pk.add_(1)
    ev = torch.cuda.current_stream().record_event()
    stream.wait_event(ev)
    pre.transfer_write_on_cuda(dec.get_session_id(), pk.data_ptr(), dk.data_ptr(), pk.numel(), stream.cuda_stream)
    torch.cuda.current_stream().wait_stream(stream)
    check(torch.equal(dk, pk), "transfer_write_on_cuda with a torch stream")
    pre.close()
    dec.close()


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "trap":
        trap()
    elif what == "engine":
        engine()
    elif what == "store":
        store(sys.argv[2])
    elif what == "torch":
        torch_cuda(sys.argv[2])
    print("OK", flush=True)
