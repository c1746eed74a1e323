"""Failures come back as return codes with the reason in the log; the interpreter survives."""

import os
import subprocess
import sys
import textwrap
import unittest

from _support import ROOT

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
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MC_LOG_LEVEL="warn")
        p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, "child failed:\n" + p.stderr[-4000:])
        self.assertEqual(p.stdout.strip(), "alive")
        # The library logs each failure with its reason.
        for reason in ["connection refused", "not inside registered memory", "unknown or closed handle"]:
            self.assertIn(reason, p.stderr)
        # And the Python layer logs on the "mooncake" logger.
        self.assertIn("mooncake: transfer_sync_write", p.stderr)


if __name__ == "__main__":
    unittest.main()
