package master

import (
	"testing"
	"time"
)

// An upsert commit of a leased key replaces the value (no lease check, as
// Mooncake's upsert); the old value's space is held until the lease ends.
func TestPutSlotUpsertOfLeased(t *testing.T) {
	m, clk := newTestMaster(t, Config{Durable: true, LeaseTTL: 100 * time.Millisecond}, map[string]uint64{"a": 1 << 20})
	mustPut(t, m, "k", 100, ReplicateConfig{})
	if _, err := m.GetReplicaList("k"); err != nil { // takes a lease
		t.Fatal(err)
	}
	slot, _ := reserve(t, m, "w", 100, "k")
	withBoth := m.Stats().Used
	if _, gone, err := m.PutCommit("w", "k", slot, 9, ReplicateConfig{}, true); err != nil || gone {
		t.Fatalf("upsert commit of a leased key: gone=%v err=%v", gone, err)
	}
	if info, _ := m.Query("k"); info.CRC != 9 {
		t.Fatalf("value not replaced: %+v", info)
	}
	if used := m.Stats().Used; used != withBoth {
		t.Fatalf("old value's space released under its lease: %d, want %d", used, withBoth)
	}
	clk.Advance(200 * time.Millisecond)
	m.Tick()
	if used := m.Stats().Used; used >= withBoth {
		t.Fatalf("old value's space kept after its lease: %d", used)
	}
}
