package store

import (
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/cuda/cudatest"
)

// TestDevicePhases runs the device phases against the simulated device
// (whose memory the host cannot touch): every put and get succeeds.
func TestDevicePhases(t *testing.T) {
	cfg := Config{Sizes: []int{64 << 10}, Clients: []int{1}, SegmentSize: 16 << 20, Nodes: 1, Duration: 200 * time.Millisecond,
		Rounds: 1, Device: "cuda", CUDALib: cudatest.Library(t)}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := inProcessCluster(t.Context(), cfg, 1, 64<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for _, op := range []string{"put-device", "get-into-device"} {
		r := runPhase(t.Context(), c.system, c.mc, op, 64<<10, 8, "dev", cfg.Duration)
		if r.Errors != 0 || r.Ops == 0 {
			t.Fatalf("%s: %d ops, %d errors, first %v", op, r.Ops, r.Errors, r.FirstErr)
		}
	}
	bad := cfg
	bad.Device = "tpu"
	if bad.Validate() == nil {
		t.Fatal("device tpu accepted")
	}
}
