package tracesim

import (
	"errors"
	"testing"
)

// TestBeladyBoundsPolicies: Belady's optimum is the ideal when unlimited,
// at or above every online policy at every capacity, and falls with the
// capacity.
func TestBeladyBoundsPolicies(t *testing.T) {
	tr := synthTrace(1500, 5)
	ideal, _ := IdealHits(tr)
	if b := SimulateBelady(tr, Unlimited); b.Hits != ideal || b.Evictions != 0 {
		t.Fatalf("unlimited Belady %+v, ideal %d", b, ideal)
	}
	prev := ideal
	for _, c := range []int{200, 50, 20} {
		b := SimulateCache(tr, Belady, c)
		if b.Policy != Belady || b.Hits > prev || b.Evictions == 0 {
			t.Fatalf("%d blocks: %+v (previous capacity %d hits)", c, b, prev)
		}
		prev = b.Hits
		for _, p := range Policies {
			if r := SimulateCache(tr, p, c); r.Hits > b.Hits {
				t.Fatalf("%d blocks: %v %d hits above Belady %d", c, p, r.Hits, b.Hits)
			}
		}
	}
}

// TestBeladyHandWorked: a pool of 2 blocks. For [3], Belady drops 2 (1
// and 2 are next used together; the deeper goes), so [1,2] hits 1; LRU
// drops 1, the head, and [1,2] hits nothing.
func TestBeladyHandWorked(t *testing.T) {
	reqs := []Request{{Timestamp: 0, HashIDs: []int64{1, 2}}, {Timestamp: 1, HashIDs: []int64{3}},
		{Timestamp: 2, HashIDs: []int64{1, 2}}, {Timestamp: 3, HashIDs: []int64{9}}, {Timestamp: 4, HashIDs: []int64{3}}}
	if b := SimulateBelady(reqs, 2); b.Hits != 1 || b.Evictions != 4 {
		t.Fatalf("Belady %+v, want 1 hit, 4 evictions", b)
	}
	if l := SimulateCache(reqs, LRU, 2); l.Hits != 0 {
		t.Fatalf("LRU hits %d, want 0", l.Hits)
	}
}

func TestParsePolicy(t *testing.T) {
	for name, want := range map[string]Policy{"lru": LRU, "LFU": LFU, "length-aware": LengthAware, "tail-first": TailFirst, "retention": Retention, "Retention": Retention} {
		if p, err := ParsePolicy(name); err != nil || p != want {
			t.Errorf("%q: %v %v", name, p, err)
		}
	}
	for _, bad := range []string{"", "belady", "classceiling", "mru"} {
		if _, err := ParsePolicy(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	c := DefaultRouteConfig()
	c.InstancePolicy = Belady
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Belady instances: %v", err)
	}
	c.InstancePolicy = ClassCeiling
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("class ceiling instances: %v", err)
	}
	c.InstancePolicy = Retention
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
