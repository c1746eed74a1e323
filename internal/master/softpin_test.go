package master

import (
	"testing"
	"time"
)

func TestUpsertSoftPinActions(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20})
	upsert := func(key string, size uint64, rc ReplicateConfig) ObjectInfo {
		t.Helper()
		if _, err := m.Upsert("writer", key, size, rc); err != nil {
			t.Fatalf("upsert %q: %v", key, err)
		}
		if err := m.PutEnd("writer", key, 1); err != nil {
			t.Fatal(err)
		}
		info, err := m.Query(key)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	t0 := clk.Now()
	pinned := upsert("k", 100, ReplicateConfig{SoftPin: true, SoftPinTTL: time.Hour}) // ENABLE on a new key
	if want := t0.Add(time.Hour); !pinned.SoftPinUntil.Equal(want) {
		t.Fatalf("ENABLE: pinned until %v, want %v", pinned.SoftPinUntil, want)
	}
	clk.Advance(time.Minute)
	for _, size := range []uint64{100, 300} { // rewritten in place, then reallocated
		if got := upsert("k", size, ReplicateConfig{KeepSoftPin: true}); !got.SoftPinUntil.Equal(pinned.SoftPinUntil) {
			t.Fatalf("PRESERVE (size %d): pinned until %v, want %v", size, got.SoftPinUntil, pinned.SoftPinUntil)
		}
	}
	if got := upsert("k", 300, ReplicateConfig{SoftPin: true, SoftPinTTL: 2 * time.Hour}); !got.SoftPinUntil.Equal(clk.Now().Add(2 * time.Hour)) {
		t.Fatalf("ENABLE on an upsert: pinned until %v", got.SoftPinUntil)
	}
	if got := upsert("k", 300, ReplicateConfig{}); !got.SoftPinUntil.IsZero() { // DISABLE
		t.Fatalf("DISABLE: pinned until %v", got.SoftPinUntil)
	}
	if got := upsert("k", 300, ReplicateConfig{KeepSoftPin: true}); !got.SoftPinUntil.IsZero() {
		t.Fatalf("PRESERVE of no pin: pinned until %v", got.SoftPinUntil)
	}
	upsert("short", 100, ReplicateConfig{SoftPin: true, SoftPinTTL: time.Second})
	clk.Advance(2 * time.Second)
	if got := upsert("short", 100, ReplicateConfig{KeepSoftPin: true}); !got.SoftPinUntil.IsZero() {
		t.Fatalf("PRESERVE of an expired pin: pinned until %v", got.SoftPinUntil)
	}
	if got := upsert("new", 100, ReplicateConfig{KeepSoftPin: true}); !got.SoftPinUntil.IsZero() {
		t.Fatalf("PRESERVE on a new key: pinned until %v", got.SoftPinUntil)
	}
	// PRESERVE on a leased key (the upsert retires the leased value) keeps its pin.
	upsert("leased", 100, ReplicateConfig{SoftPin: true, SoftPinTTL: time.Hour})
	before, _ := m.GetReplicaList("leased")
	if after := upsert("leased", 100, ReplicateConfig{KeepSoftPin: true}); !after.SoftPinUntil.Equal(before.SoftPinUntil) {
		t.Fatalf("PRESERVE of a leased key: pinned until %v, want %v", after.SoftPinUntil, before.SoftPinUntil)
	}
}
