"""GPU memory through the binding, against the simulated CUDA driver (built
here with gcc from internal/cuda/cudatest: its device memory traps any host
access), or with MOONCAKE_GPU_TESTS=real against the real libcuda.so.1.

Each scenario runs in a child process (cuda_child.py) because the library
loads the driver once per process, from $MOONCAKE_CUDA_LIB."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

from _support import HERE, PACKAGE_PATH, ROOT, start_master

REAL = os.environ.get("MOONCAKE_GPU_TESTS") == "real"


def _torch_cuda():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


class CudaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.env = {"PYTHONPATH": PACKAGE_PATH, "PYTHONUNBUFFERED": "1"}
        if REAL:
            cls.env["MOONCAKE_CUDA_LIB"] = ""
            cls.env["CUDA_SECOND_DEVICE"] = "0"
        else:
            cc = shutil.which("gcc")
            if cc is None:
                shutil.rmtree(cls.tmp)
                raise unittest.SkipTest("gcc not installed: cannot build the simulated CUDA driver")
            lib = os.path.join(cls.tmp, "libcuda.so.1")
            subprocess.run([cc, "-shared", "-fPIC", "-O1", "-pthread", "-o", lib,
                            os.path.join(ROOT, "internal", "cuda", "cudatest", "csrc", "fakecuda.c")], check=True)
            cls.env["MOONCAKE_CUDA_LIB"] = lib
            cls.env["CUDA_SECOND_DEVICE"] = "1"
        cls.master, cls.addr = start_master()

    @classmethod
    def tearDownClass(cls):
        cls.master.stop()
        shutil.rmtree(cls.tmp)

    def child(self, *args):
        e = dict(os.environ)
        e.update(self.env)
        return subprocess.run([sys.executable, os.path.join(HERE, "cuda_child.py")] + list(args), env=e,
                              capture_output=True, text=True, timeout=120)

    def run_ok(self, *args):
        r = self.child(*args)
        self.assertEqual(r.returncode, 0, "child %s failed:\n%s\n%s" % (args, r.stdout, r.stderr))
        self.assertIn("OK", r.stdout)

    @unittest.skipIf(REAL, "the trap is the simulated device's")
    def test_host_read_of_device_memory_dies_with_sigsegv(self):
        r = self.child("trap")
        self.assertIn("reading device memory from the host", r.stdout)
        self.assertNotIn("without a fault", r.stdout)
        self.assertEqual(r.returncode, -signal.SIGSEGV, r.stdout + r.stderr)

    def test_pd_kv_device_to_device(self):
        self.run_ok("engine")

    def test_store_device_buffers(self):
        self.run_ok("store", self.addr)

    @unittest.skipUnless(REAL and _torch_cuda(), "needs a GPU and torch with CUDA")
    def test_torch_cuda_tensors(self):
        self.run_ok("torch", self.addr)


if __name__ == "__main__":
    unittest.main()
