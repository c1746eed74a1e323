"""Failures come back as return codes with the reason in the log; the interpreter survives."""

import os
import re
import subprocess
import sys
import textwrap
import unittest

from _support import PACKAGE_PATH

CHILD = textwrap.dedent(r'''
    import ctypes, logging
    import numpy as np
    from mooncake import _native
    from mooncake.engine import TransferEngine
    logging.basicConfig(level=logging.ERROR)
    lib = _native.lib()
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    a = np.zeros(1 << 16, dtype=np.uint8)
    assert e.register_memory(a.ctypes.data, a.nbytes) == 0
    rcs = [
        e.transfer_sync_write("127.0.0.1:1", a.ctypes.data, 4096, 16),   # nobody there
        e.transfer_sync_read(e.get_session_id(), 8, 4096, 16),           # wild local pointer
        e.transfer_sync_write(e.get_session_id(), a.ctypes.data, 8, 1 << 40),  # huge length
        e.register_memory(0, 1 << 62),
        e.get_batch_transfer_status([-3]),
        e.transfer_check_status(0),
    ]
    assert all(rc < 0 for rc in rcs), rcs
    # Raw ABI misuse: unknown and negative handles, NULL pointers, negative counts.
    assert lib.mc_engine_close(999999) < 0
    assert lib.mc_engine_rpc_port(-1) < 0
    assert lib.mc_engine_transfer(999999, None, 1, 1, None, None, None) < 0
    assert lib.mc_engine_transfer(e._h, None, 1, -5, None, None, None) < 0
    assert lib.mc_engine_transfer(e._h, b"127.0.0.1:1", 1, 3, None, None, None) < 0
    assert lib.mc_engine_name(e._h, None, 0) < 0
    assert lib.mc_batch_wait(e._h, 2, None) < 0
    assert lib.mc_engine_notifies(e._h, None) < 0
    assert lib.mc_engine_notify(e._h, b"127.0.0.1:1", b"n", None, 5) < 0
    assert lib.mc_engine_alloc_managed(e._h, 1 << 62) == 0
    assert "refused" in _native.last_error() or _native.last_error()
    e.close()
    print("alive", flush=True)
''')


class ErrorsTest(unittest.TestCase):
    def test_failures_are_codes_with_reasons_logged(self):
        env = dict(os.environ, PYTHONPATH=PACKAGE_PATH, MC_LOG_LEVEL="warn")
        p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, "child failed:\n" + p.stderr[-4000:])
        self.assertEqual(p.stdout.strip(), "alive")
        # The library logs each failure with its reason.
        for reason in ["connection refused", "not inside registered memory", "unknown or closed handle"]:
            self.assertIn(reason, p.stderr)
        # And the Python layer logs on the "mooncake" logger.
        self.assertIn("mooncake: transfer_sync_write", p.stderr)
        # The operation is named once: the library's reason does not repeat it
        # ("mooncake: remove: remove: ..." was the old shape).
        self.assertIsNone(re.search(r"mooncake: ([\w ]+): \1:", p.stderr), p.stderr[-2000:])


if __name__ == "__main__":
    unittest.main()


TIMEOUT_CHILD = textwrap.dedent(r'''
    import json, sys, time
    import numpy as np
    from mooncake.engine import TransferEngine
    peer = json.loads(sys.argv[1])
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    a = np.ones(8 << 20, dtype=np.uint8)
    assert e.register_memory(a.ctypes.data, a.nbytes) == 0
    assert e.transfer_sync_write(peer["session"], a.ctypes.data, peer["addr"], 4096) == 0
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.monotonic()
    bid = e.transfer_submit_write(peer["session"], a.ctypes.data, peer["addr"], 8 << 20)
    assert bid > 0, bid
    rc = 0
    while rc == 0 and time.monotonic() - t0 < 60:
        rc = e.transfer_check_status(bid)
        time.sleep(0.01)
    print(json.dumps({"rc": rc, "seconds": time.monotonic() - t0}), flush=True)
    e.close()
''')


class TimeoutTest(unittest.TestCase):
    def test_stalled_peer_reports_timeout(self):
        # The peer stops (SIGSTOP) after the handshake; an 8 MiB write cannot finish and
        # transfer_check_status must report -2 once MC_TRANSFER_TIMEOUT (5 s, the minimum) passes.
        import json
        import signal
        from _support import Child, python_child
        peer = python_child("engine_peer.py", 8 << 20)
        child = None
        try:
            info = json.loads(peer.readline(60))
            child = Child([sys.executable, "-c", TIMEOUT_CHILD, json.dumps(info)],
                          env={"PYTHONPATH": PACKAGE_PATH, "MC_TRANSFER_TIMEOUT": "5"})
            self.assertEqual(child.readline(60), "ready")
            os.kill(peer.p.pid, signal.SIGSTOP)
            try:
                child.p.stdin.write(b"go\n")
                child.p.stdin.flush()
                res = json.loads(child.readline(60))
            finally:
                os.kill(peer.p.pid, signal.SIGCONT)
            self.assertEqual(res["rc"], -2, res)
            self.assertGreaterEqual(res["seconds"], 4.5)
        finally:
            if child is not None:
                self.assertEqual(child.stop(), 0)
            peer.stop()
