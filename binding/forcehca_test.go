package main

import (
	"testing"

	"github.com/kvcache-go/mooncake/transfer"
)

// TestRDMAWithoutDevices: protocol rdma on a host without RDMA opens a
// working TCP engine with a warning (Mooncake's fallback when it finds no
// HCA); with MC_FORCE_HCA set the open fails with a clear error instead.
func TestRDMAWithoutDevices(t *testing.T) {
	t.Setenv("MC_FORCE_HCA", "")
	cfg, warns, err := engineArgs("127.0.0.1", "P2PHANDSHAKE", "rdma", "mlx5_0")
	if err != nil || cfg.Transport != transfer.TransportTCP || len(warns) == 0 {
		t.Fatalf("rdma without devices: %+v %v %v", cfg.Transport, warns, err)
	}
	for _, v := range []string{"1", "true", "yes"} {
		t.Setenv("MC_FORCE_HCA", v)
		if _, _, err := engineArgs("127.0.0.1", "P2PHANDSHAKE", "rdma", "mlx5_0"); err == nil || codeOf(err) >= 0 {
			t.Fatalf("MC_FORCE_HCA=%s: %v", v, err)
		}
		if _, _, err := engineArgs("127.0.0.1", "P2PHANDSHAKE", "tcp", ""); err != nil {
			t.Fatalf("MC_FORCE_HCA=%s with tcp: %v", v, err)
		}
	}
	t.Setenv("MC_FORCE_HCA", "0")
	if _, _, err := engineArgs("127.0.0.1", "P2PHANDSHAKE", "rdma", ""); err != nil {
		t.Fatalf("MC_FORCE_HCA=0: %v", err)
	}
}
