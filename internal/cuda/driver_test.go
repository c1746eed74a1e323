package cuda_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/cuda"
	"github.com/kvcache-go/mooncake/internal/cuda/cudatest"
)

func TestMain(m *testing.M) {
	switch os.Getenv("CUDATEST_CHILD") {
	case "touch":
		touchChild()
	case "ipc":
		ipcChild()
	}
	goleak.VerifyTestMain(m)
}

func TestLoadMissing(t *testing.T) {
	_, err := cuda.Load(filepath.Join(t.TempDir(), "libcuda-not-here.so.1"))
	if !errors.Is(err, cuda.ErrNoDriver) {
		t.Fatalf("Load of a missing library: %v, want ErrNoDriver", err)
	}
}

func TestLoadNotADriver(t *testing.T) {
	// A real library without the driver's symbols: refused, not a crash.
	for _, lib := range []string{"libc.so.6", "libm.so.6"} {
		if _, err := cuda.Load(lib); !errors.Is(err, cuda.ErrNoDriver) {
			t.Fatalf("Load(%s): %v, want ErrNoDriver", lib, err)
		}
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func TestSimulatedDriver(t *testing.T) {
	d := cudatest.Simulated(t)
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
	if _, _, err := d.PointerInfo(0); !errors.Is(err, cuda.ErrInvalid) {
		t.Fatalf("PointerInfo(0) = %v", err)
	}
	if base, size, err := d.AddressRange(1, p+4096); err != nil || base != p || size != 1<<20 {
		t.Fatalf("AddressRange = %#x %d %v, want %#x", base, size, err, p)
	}

	// Round trip through pinned memory.
	pinned, err := d.HostAlloc(1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.HostFree(1, pinned)
	copy(pinned, pattern(1<<20, 3))
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
	// Device to device, on one device and between two.
	q, err := d.MemAlloc(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(0, q)
	if err := d.CopyDevice(0, q, 1, p, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDevice(1, p+512, 1, p, 1024); err != nil {
		t.Fatal(err)
	}
	clear(back)
	if err := d.CopyToHost(0, back, q); err != nil || !bytes.Equal(back, pinned) {
		t.Fatalf("peer copy: %v, bytes equal %v", err, bytes.Equal(back, pinned))
	}
	// A copy past the end of the allocation is the driver's error, reported.
	var ce *cuda.Error
	if err := d.CopyToHost(1, make([]byte, 2<<20), p); !errors.As(err, &ce) || ce.Func != "cuMemcpyDtoH" {
		t.Fatalf("oversized copy: %v", err)
	}
	if _, err := d.MemAlloc(5, 16); !errors.Is(err, cuda.ErrInvalid) {
		t.Fatalf("MemAlloc on device 5 of 2: %v", err)
	}
}

// TestSimulatedDeviceTraps proves that the simulated device memory cannot
// be read from the host: in process the fault is at the device address,
// and a child process that reads it dies of SIGSEGV.
func TestSimulatedDeviceTraps(t *testing.T) {
	d := cudatest.Simulated(t)
	p, err := d.MemAlloc(0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(0, p)
	func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			r := recover()
			re, ok := r.(interface{ Addr() uintptr })
			if !ok {
				t.Errorf("reading device memory from the host did not fault (recovered %v)", r)
				return
			}
			if re.Addr() != p+8 {
				t.Errorf("fault at %#x, want the device address %#x", re.Addr(), p+8)
			}
		}()
		b := hostView(p, 4096)
		sink = b[8]
		t.Error("read device memory from the host")
	}()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CUDATEST_CHILD=touch", "CUDATEST_LIB="+cudatest.SimulatedLibrary(t))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Success() {
		t.Fatalf("child that reads device memory: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "signal SIGSEGV") || !strings.Contains(string(out), "touching device memory") {
		t.Fatalf("child did not die of SIGSEGV at the device read:\n%s", out)
	}
}

// touchChild reads simulated device memory from the host and must die.
func touchChild() {
	d, err := cuda.Load(os.Getenv("CUDATEST_LIB"))
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	p, err := d.MemAlloc(0, 4096)
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	fmt.Println("touching device memory")
	b := hostView(p, 4096)
	fmt.Println(b[0])
	os.Exit(0)
}

// TestIPC opens a device allocation of this process in a child process,
// which writes into it through the driver.
func TestIPC(t *testing.T) {
	lib := cudatest.SimulatedLibrary(t)
	d, err := cuda.Load(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	testIPC(t, d, lib)
}

func testIPC(t *testing.T, d *cuda.Driver, lib string) {
	p, err := d.MemAlloc(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(0, p)
	if err := d.CopyFromHost(0, p, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	h, err := d.IPCHandleOf(0, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.IPCOpen(0, h); err == nil {
		t.Fatal("a process opened its own IPC handle")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CUDATEST_CHILD=ipc", "CUDATEST_LIB="+lib, "CUDATEST_HANDLE="+fmt.Sprintf("%x", h.Reserved[:]))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	back := make([]byte, 1<<20)
	if err := d.CopyToHost(0, back, p); err != nil {
		t.Fatal(err)
	}
	if want := pattern(1<<20, 9); !bytes.Equal(back[4096:], want[:len(back)-4096]) {
		t.Fatal("the child's write through the IPC mapping is not in the allocation")
	}
}

// ipcChild opens the parent's allocation and writes a pattern at +4096.
func ipcChild() {
	d, err := cuda.Load(os.Getenv("CUDATEST_LIB"))
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	var h cuda.IPCHandle
	s := os.Getenv("CUDATEST_HANDLE")
	for i := range h.Reserved {
		v, _ := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		h.Reserved[i] = byte(v)
	}
	q, err := d.IPCOpen(0, h)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	if err := d.CopyFromHost(0, q+4096, pattern(1<<20-4096, 9)); err != nil {
		fmt.Println("copy:", err)
		os.Exit(3)
	}
	if err := d.IPCClose(0, q); err != nil {
		fmt.Println("close:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// TestRealDriver runs on a host with an NVIDIA driver and a device; it
// skips, saying so, elsewhere.
func TestRealDriver(t *testing.T) {
	d, err := cuda.Load("")
	if err != nil {
		t.Skipf("no CUDA driver on this host (%v): GPU tests skipped", err)
	}
	defer d.Close()
	n, err := d.DeviceCount()
	if err != nil || n == 0 {
		t.Skipf("CUDA driver without a usable device (%d, %v)", n, err)
	}
	t.Logf("%d CUDA device(s)", n)
	const size = 64 << 20
	p, err := d.MemAlloc(0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(0, p)
	if isDev, ord, err := d.PointerInfo(p + 1000); err != nil || !isDev || ord != 0 {
		t.Fatalf("PointerInfo(device) = %v %d %v", isDev, ord, err)
	}
	host := make([]byte, 64)
	if isDev, _, err := d.PointerInfo(uintptr(unsafe.Pointer(&host[0]))); err != nil || isDev {
		t.Fatalf("PointerInfo(Go heap) = %v %v", isDev, err)
	}
	pinned, err := d.HostAlloc(0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer d.HostFree(0, pinned)
	if isDev, _, err := d.PointerInfo(uintptr(unsafe.Pointer(&pinned[0]))); err != nil || isDev {
		t.Fatalf("PointerInfo(pinned) = %v %v", isDev, err)
	}
	if base, sz, err := d.AddressRange(0, p+4096); err != nil || base != p || sz < size {
		t.Fatalf("AddressRange = %#x %d %v, want %#x", base, sz, err, p)
	}
	copy(pinned, pattern(size, 5))
	start := time.Now()
	if err := d.CopyFromHost(0, p, pinned); err != nil {
		t.Fatal(err)
	}
	h2d := time.Since(start)
	q, err := d.MemAlloc(0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(0, q)
	if err := d.CopyDevice(0, q, 0, p, size); err != nil {
		t.Fatal(err)
	}
	back, err := d.HostAlloc(0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer d.HostFree(0, back)
	start = time.Now()
	if err := d.CopyToHost(0, back, q); err != nil {
		t.Fatal(err)
	}
	d2h := time.Since(start)
	if !bytes.Equal(pinned, back) {
		t.Fatal("device round trip changed the bytes")
	}
	t.Logf("pinned 64 MiB: host->device %.1f GB/s, device->host %.1f GB/s (one copy each, cold)",
		size/h2d.Seconds()/1e9, size/d2h.Seconds()/1e9)
	runtime.KeepAlive(host)
	testIPC(t, d, "")
}

// hostView views n bytes at address p as a Go slice: for device memory, the
// very mistake the simulated device must catch.
var sink byte

func hostView(p uintptr, n int) []byte {
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n)
}

func TestPresent(t *testing.T) {
	if !cuda.Present(cudatest.SimulatedLibrary(t)) {
		t.Fatal("the simulated driver is not Present")
	}
	if cuda.Present("libc.so.6") || cuda.Present(filepath.Join(t.TempDir(), "none.so")) {
		t.Fatal("a library without cuInit, or none, is Present")
	}
}
