package master

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// BatchExist answers as Exist does key by key, and refreshes recency.
func TestBatchExist(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20})
	mustPut(t, m, "done", 100, ReplicateConfig{})
	if _, err := m.PutStart("w", "pending", 100, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	before := m.objects.get("done").lastAccess
	clk.Advance(time.Second)
	keys := []string{"done", "pending", "missing", "", strings.Repeat("x", m.Config().MaxKeyLen+1), "done"}
	got := m.BatchExist(keys)
	if want := []bool{true, false, false, false, false, true}; !slices.Equal(got, want) {
		t.Fatalf("BatchExist = %v, want %v", got, want)
	}
	for i, k := range keys {
		if ok, _ := m.Exist(k); ok != got[i] {
			t.Fatalf("Exist(%q) = %v, BatchExist %v", k, ok, got[i])
		}
	}
	if m.objects.get("done").lastAccess <= before {
		t.Fatal("BatchExist did not refresh recency")
	}
}

// A batch longer than one hold of the lock answers exactly while other
// calls put and remove keys between its slices: keys present throughout
// read true, keys never complete read false, and the churned keys read
// their final state once the churn is over.
func TestBatchExistSlicedChurn(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 30})
	n := 2*existHold + 300
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	// i%4: 0 stays, 1 is removed during the churn, 2 is put during it,
	// 3 is only started (never complete).
	for i, k := range keys {
		switch i % 4 {
		case 0, 1:
			mustPut(t, m, k, 64, ReplicateConfig{})
		case 3:
			if _, err := m.PutStart("w", k, 64, ReplicateConfig{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := len(keys) - 1; i >= 0; i-- { // from the end: against the batch's order
			switch i % 4 {
			case 1:
				if err := m.Remove(keys[i], true); err != nil {
					t.Error(err)
					return
				}
			case 2:
				if _, err := m.PutStart("writer", keys[i], 64, ReplicateConfig{}); err != nil {
					t.Error(err)
					return
				}
				if err := m.PutEnd("writer", keys[i], 1); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	check := func(final bool) {
		got := m.BatchExist(keys)
		for i, ok := range got {
			want, known := false, true
			switch i % 4 {
			case 0:
				want = true
			case 1:
				known = final
			case 2:
				want, known = true, final
			}
			if known && ok != want {
				t.Fatalf("key %q (class %d, final %v): BatchExist %v", keys[i], i%4, final, ok)
			}
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		check(false)
	}
	check(true)
}

// A chain's blocks looked up in one batch keep their depths across the
// batch's holds of the lock.
func TestBatchExistChainAcrossSlices(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 30})
	n := existHold + 10
	keys := make([]string, n)
	for i := range keys {
		keys[i] = blockKey("c", i)
		mustPut(t, m, keys[i], 64, ReplicateConfig{})
	}
	for i, ok := range m.BatchExist(keys) {
		if !ok {
			t.Fatalf("block %d missing", i)
		}
	}
	for _, i := range []int{0, existHold - 1, existHold, n - 1} {
		if o := m.objects.get(keys[i]); o.chainDepth() != i {
			t.Fatalf("block %d: depth %d", i, o.chainDepth())
		}
	}
}
