package master

import (
	"fmt"
	"testing"
	"time"
)

// TestSampledEvictionAtScale: above evictExact objects an eviction is a
// bounded round over a random sample, ordered by the policy: a put into a
// full pool succeeds, one call evicts at most evictRounds x evictTake
// objects, none of them recently used, and the rest of the target is paid
// by the next Ticks.
func TestSampledEvictionAtScale(t *testing.T) {
	n := evictExact + 4096
	m, clk := newTestMaster(t, Config{ClientTTL: time.Hour, LeaseTTL: time.Second}, map[string]uint64{"a": uint64(n) * 64})
	for i := range n {
		mustPut(t, m, fmt.Sprintf("k%06d", i), 64, ReplicateConfig{})
	}
	clk.Advance(time.Minute)
	for i := n / 2; i < n; i++ { // the newer half is used again
		if _, err := m.GetReplicaList(fmt.Sprintf("k%06d", i)); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Second) // leases over
	mustPut(t, m, "new", 64, ReplicateConfig{})
	st := m.Stats()
	if st.Evictions == 0 || st.Evictions > evictRounds*evictTake {
		t.Fatalf("%d objects evicted by one put, want 1..%d", st.Evictions, evictRounds*evictTake)
	}
	m.mu.Lock()
	recent := 0
	for i := n / 2; i < n; i++ {
		if m.objects.get(fmt.Sprintf("k%06d", i)) == nil {
			recent++
		}
	}
	debt := m.evictDebt
	m.mu.Unlock()
	if recent > 0 {
		t.Fatalf("%d recently used objects evicted before older ones", recent)
	}
	if debt == 0 {
		t.Fatal("the rest of the eviction's target was dropped")
	}
	for range 100 {
		m.Tick()
		clk.Advance(10 * time.Millisecond)
	}
	if st2 := m.Stats(); st2.Evictions <= st.Evictions {
		t.Fatalf("the following ticks evicted nothing: %d then %d", st.Evictions, st2.Evictions)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cap, used := m.usageLocked(); float64(used) > m.cfg.HighWatermark*float64(cap) {
		t.Fatalf("use %d of %d still above the watermark after the ticks", used, cap)
	}
}
