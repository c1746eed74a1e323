"""mooncake.shared_segment and engine.SharedSegment: two processes (a gloo group) share pages."""

import json
import unittest

from _support import free_port, python_child
from mooncake import engine

try:
    import torch  # noqa: F401
    import torch.distributed as dist
    HAVE_GLOO = dist.is_available() and dist.is_gloo_available()
except ImportError:
    HAVE_GLOO = False


class EngineSegmentTest(unittest.TestCase):
    def test_two_phases_and_checks(self):
        self.assertTrue(engine.SharedSegment.supported())
        self.assertFalse(engine.SharedSegment.supported(mmap=False))
        self.assertFalse(engine.SharedSegment.supported(True, True))
        with self.assertRaises(RuntimeError):
            engine.SharedSegment.create("x", 4096, 1, 0, mmap=False)
        owner, b0 = engine.SharedSegment.create("x", 8192, 2, 0)
        peer, b1 = engine.SharedSegment.create("x", 8192, 2, 1)
        other, b2 = engine.SharedSegment.create("y", 8192, 2, 1)
        with self.assertRaisesRegex(RuntimeError, "disagree"):
            other.complete([b0, b2])
        with self.assertRaisesRegex(RuntimeError, "not a segment blob"):
            peer.complete([b0, b"junk"])
        owner.complete([b0, b1])
        peer.complete([b0, b1])
        self.assertTrue(owner.ready() and peer.ready())
        self.assertNotEqual(owner.base_addr(), peer.base_addr())  # two mappings of the same pages
        import ctypes
        ctypes.memmove(owner.base_addr() + 100, b"shared!", 7)
        self.assertEqual(ctypes.string_at(peer.base_addr() + 100, 7), b"shared!")
        self.assertEqual((peer.size(), peer.device_addr()), (8192, 0))


@unittest.skipUnless(HAVE_GLOO, "torch with gloo missing")
class GroupTest(unittest.TestCase):
    def start(self, shapes):
        port = free_port()
        kids = [python_child("shared_segment_child.py", r, port, s) for r, s in enumerate(shapes)]
        for k in kids:
            self.addCleanup(k.stop)
        return kids, [json.loads(k.readline(60)) for k in kids]

    def test_pages_shared_across_processes(self):
        (r0, r1), hello = self.start([4, 4])
        self.assertEqual([h.get("ready") for h in hello], [True, True])
        self.assertEqual(r1.call({"op": "write", "value": 3}), {"ok": True})
        got = r0.call({"op": "read"})
        self.assertEqual((got["k"], got["v"], got["k0"]), (36.0, [0, 3, 6, 9, 12], 0.0))


if __name__ == "__main__":
    unittest.main()
