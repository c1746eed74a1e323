package transfer

import (
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/cuda/cudatest"
)

// TestDeviceRun runs the benchmark with device buffers of the simulated
// driver (target in this process), device to device over tcp and shm and
// device to host over tcp, and checks that bytes moved and the baseline is
// pinned cuMemcpy.
func TestDeviceRun(t *testing.T) {
	lib := cudatest.Library(t)
	for _, c := range []Config{
		{Transport: "tcp", Device: "cuda"},
		{Transport: "shm", Device: "cuda"},
		{Transport: "tcp", Device: "cuda", TargetDevice: "cpu"},
		{Transport: "tcp", Device: "cpu", TargetDevice: "cuda", Op: "read"},
	} {
		c.CUDALib = lib
		if c.Op == "" {
			c.Op = "write"
		}
		c.BlockSize, c.BatchSize, c.Threads, c.Duration = 256<<10, 2, 1, 200*time.Millisecond
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		tg, err := StartTarget(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := ParseLine(tg.Line())
		r, err := RunInitiator(t.Context(), c, info)
		_ = tg.Close()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if r.Bytes == 0 || r.BaselineGBPerS <= 0 || r.Baseline != "pinned cuMemcpy, the slower direction" {
			t.Fatalf("%+v: result %+v", c, r)
		}
		t.Log(r)
	}
	bad := Config{Transport: "inproc", Op: "write", Device: "cuda", CUDALib: lib, BlockSize: 4096, BatchSize: 1, Threads: 1, Duration: time.Second}
	if bad.Validate() == nil {
		t.Fatal("inproc with device memory accepted")
	}
	bad.Transport, bad.Device = "tcp", "tpu"
	if bad.Validate() == nil {
		t.Fatal("device tpu accepted")
	}
}
