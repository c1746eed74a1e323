package cuda

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"unsafe"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeDriver builds testdata/fakecuda.c into a shared library and loads it.
func fakeDriver(t *testing.T) *Driver {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not installed: cannot build the fake CUDA driver (scripts/deps.sh installs it)")
	}
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", lib, "testdata/fakecuda.c").CombinedOutput(); err != nil {
		t.Fatalf("building the fake driver: %v\n%s", err, out)
	}
	d, err := Load(lib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "libcuda-not-here.so.1"))
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Load of a missing library: %v, want ErrNoDriver", err)
	}
}

func TestLoadNotADriver(t *testing.T) {
	// A real library without the driver's symbols: refused, not a crash.
	for _, lib := range []string{"libc.so.6", "libm.so.6"} {
		if _, err := Load(lib); !errors.Is(err, ErrNoDriver) {
			t.Fatalf("Load(%s): %v, want ErrNoDriver", lib, err)
		}
	}
}

func TestFakeDriver(t *testing.T) {
	d := fakeDriver(t)
	if n, err := d.DeviceCount(); err != nil || n != 2 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	p, err := d.MemAlloc(1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(1, p)

	// Device memory is told from host memory, with its device.
	isDev, ord, err := d.PointerInfo(p + 100)
	if err != nil || !isDev || ord != 1 {
		t.Fatalf("PointerInfo(device) = %v %d %v", isDev, ord, err)
	}
	host := make([]byte, 64)
	if isDev, _, err := d.PointerInfo(uintptr(unsafe.Pointer(&host[0]))); err != nil || isDev {
		t.Fatalf("PointerInfo(host) = %v %v", isDev, err)
	}
	if _, _, err := d.PointerInfo(0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("PointerInfo(0) = %v", err)
	}

	// Round trip through pinned memory.
	pinned, err := d.HostAlloc(1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.HostFree(1, pinned)
	for i := range pinned {
		pinned[i] = byte(i * 7)
	}
	if err := d.CopyFromHost(1, p, pinned); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 1<<20)
	if err := d.CopyToHost(1, back, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, pinned) {
		t.Fatal("device round trip changed the bytes")
	}
	// A copy past the end of the allocation is the driver's error, reported.
	var ce *Error
	if err := d.CopyToHost(1, make([]byte, 2<<20), p); !errors.As(err, &ce) || ce.Func != "cuMemcpyDtoH" {
		t.Fatalf("oversized copy: %v", err)
	}
	if _, err := d.MemAlloc(5, 16); !errors.Is(err, ErrInvalid) {
		t.Fatalf("MemAlloc on device 5 of 2: %v", err)
	}
}

// TestRealDriver runs on a host with an NVIDIA driver and a device; it
// skips, saying so, elsewhere.
func TestRealDriver(t *testing.T) {
	d, err := Load("")
	if err != nil {
		t.Skipf("no CUDA driver on this host (%v): GPU tests skipped", err)
	}
	defer d.Close()
	n, err := d.DeviceCount()
	if err != nil || n == 0 {
		t.Skipf("CUDA driver without a usable device (%d, %v)", n, err)
	}
	p, err := d.MemAlloc(0, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(0, p)
	if isDev, ord, err := d.PointerInfo(p); err != nil || !isDev || ord != 0 {
		t.Fatalf("PointerInfo = %v %d %v", isDev, ord, err)
	}
	src := bytes.Repeat([]byte{0xa5, 0x5a, 1, 2}, 1<<20)
	if err := d.CopyFromHost(0, p, src); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(src))
	if err := d.CopyToHost(0, back, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, back) {
		t.Fatal("device round trip changed the bytes")
	}
	if os.Getenv("CUDA_VISIBLE_DEVICES") == "" {
		t.Logf("%d CUDA device(s)", n)
	}
}
