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

// Library builds the simulated driver into a temporary directory of t and
// returns the library's path. It skips t when gcc is not installed.
func Library(t testing.TB) string {
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

// Driver builds and loads the simulated driver; it is closed when t ends.
// Use one Driver per test: each load has its own device memory table.
func Driver(t testing.TB) *cuda.Driver {
	t.Helper()
	d, err := cuda.Load(Library(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}
