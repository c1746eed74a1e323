// Package cudatest gives tests a simulated CUDA device: a small C library
// (csrc/fakecuda.c, built with gcc by the test that asks for it) exporting the
// driver entry points package cuda uses. Its device memory is a memfd
// mapping kept PROT_NONE except inside the library's own copy calls, so a
// code path that touches a device pointer from the host crashes the test
// (SIGSEGV) instead of passing by luck; IPC handles work between processes
// of the host. Tests that need a device run against it on any host with
// gcc, and skip, saying so, where gcc is missing.
package cudatest

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kvcache-go/mooncake/internal/cuda"
)

//go:embed csrc/fakecuda.c
var source []byte

// Source is the simulated driver's C source (for builds outside Go tests).
func Source() []byte { return source }

// RealEnv names the environment variable that turns the device tests of
// other packages to the real driver: MOONCAKE_GPU_TESTS=real makes Library
// and Driver return libcuda.so.1 (skipping where there is none), so the
// same tests prove the path on a GPU (scripts/gpu-check.sh).
const RealEnv = "MOONCAKE_GPU_TESTS"

// Real reports whether the tests run against the real driver.
func Real() bool { return os.Getenv(RealEnv) == "real" }

// Library returns the driver library the device tests use: the simulated
// one (see SimulatedLibrary), or with MOONCAKE_GPU_TESTS=real the real
// libcuda.so.1, skipping t when it cannot be loaded or has no device.
func Library(t testing.TB) string {
	t.Helper()
	if !Real() {
		return SimulatedLibrary(t)
	}
	d, err := cuda.Load(cuda.DefaultLibrary)
	if err != nil {
		t.Skipf("%s=real but no CUDA driver: %v", RealEnv, err)
	}
	defer d.Close()
	if n, err := d.DeviceCount(); err != nil || n == 0 {
		t.Skipf("%s=real but no CUDA device (%d, %v)", RealEnv, n, err)
	}
	return cuda.DefaultLibrary
}

// SecondDevice is the ordinal tests use for "another GPU": 1 where the
// driver has two devices (the simulated one has), else 0.
func SecondDevice(d *cuda.Driver) int {
	if n, err := d.DeviceCount(); err == nil && n > 1 {
		return 1
	}
	return 0
}

// Simulated builds and loads the simulated driver (whatever RealEnv says);
// it is closed when t ends.
func Simulated(t testing.TB) *cuda.Driver {
	t.Helper()
	return load(t, SimulatedLibrary(t))
}

// SimulatedLibrary builds the simulated driver into a temporary directory
// of t and returns the library's path. It skips t when gcc is not installed.
func SimulatedLibrary(t testing.TB) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not installed: cannot build the simulated CUDA driver (scripts/deps.sh installs it)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "fakecuda.c")
	if err := os.WriteFile(src, source, 0o600); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libcuda.so.1")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-pthread", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("building the simulated CUDA driver: %v\n%s", err, out)
	}
	return lib
}

// Driver loads the driver of Library; it is closed when t ends. Use one
// Driver per test: each load of the simulated one has its own device
// memory table.
func Driver(t testing.TB) *cuda.Driver {
	t.Helper()
	return load(t, Library(t))
}

func load(t testing.TB, lib string) *cuda.Driver {
	t.Helper()
	d, err := cuda.Load(lib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}
