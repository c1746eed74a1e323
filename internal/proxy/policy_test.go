package proxy

import (
	"testing"
)

func TestRoundRobin(t *testing.T) {
	p := &RoundRobin{}
	cands := []Load{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	var got []int
	for i := 0; i < 6; i++ {
		got = append(got, p.Pick(nil, cands))
	}
	want := []int{0, 1, 2, 0, 1, 2}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("picks = %v, want %v", got, want)
		}
	}
}

func TestLeastLoaded(t *testing.T) {
	tests := []struct {
		name  string
		loads []int
		want  map[int]bool // acceptable picks
	}{
		{"single min", []int{3, 1, 2}, map[int]bool{1: true}},
		{"last", []int{3, 3, 0}, map[int]bool{2: true}},
		{"tie", []int{1, 5, 1}, map[int]bool{0: true, 2: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &LeastLoaded{}
			var c []Load
			for i, l := range tc.loads {
				c = append(c, Load{ID: string(rune('a' + i)), InFlight: l})
			}
			for k := 0; k < 4; k++ {
				if got := p.Pick(nil, c); !tc.want[got] {
					t.Fatalf("pick %d = %d, want one of %v", k, got, tc.want)
				}
			}
		})
	}
	// Ties are shared, not always the first.
	p := &LeastLoaded{}
	c := []Load{{ID: "a"}, {ID: "b"}}
	seen := map[int]bool{}
	for k := 0; k < 4; k++ {
		seen[p.Pick(nil, c)] = true
	}
	if len(seen) != 2 {
		t.Fatalf("ties always went to %v", seen)
	}
}

func TestKVAwarePrefersCachedPrefix(t *testing.T) {
	p := NewKVAware(KVAwareConfig{QueueCostBlocks: 4})
	long := PromptBlocks(string(make([]byte, 64*20)), 64) // 20 blocks
	if len(long) != 20 {
		t.Fatalf("blocks = %d, want 20", len(long))
	}
	p.Routed("b", long[:15])
	c := []Load{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	for k := 0; k < 3; k++ {
		if got := p.Pick(long, c); got != 1 {
			t.Fatalf("pick = %d, want 1 (holds 15 of 20 blocks)", got)
		}
	}
	if m := p.Matched("b", long); m != 15 {
		t.Fatalf("matched = %d, want 15", m)
	}
	// Load outweighs the cache: b has 4 in flight (16 blocks of queue) > 15 saved.
	c[1].InFlight = 4
	if got := p.Pick(long, c); got == 1 {
		t.Fatalf("picked the overloaded holder")
	}
	// Cost with 3 in flight: 12+5 = 17 < 20: holder wins again.
	c[1].InFlight = 3
	if got := p.Pick(long, c); got != 1 {
		t.Fatalf("pick = %d, want 1", got)
	}
}

func TestKVAwareLRUBound(t *testing.T) {
	p := NewKVAware(KVAwareConfig{MaxBlocksPerInstance: 4})
	b := []uint64{1, 2, 3, 4, 5, 6}
	p.Routed("a", b)
	if m := p.Matched("a", b); m != 0 {
		t.Fatalf("matched = %d, want 0 (blocks 1,2 evicted)", m)
	}
	if m := p.Matched("a", b[2:]); m != 4 {
		t.Fatalf("matched = %d, want 4", m)
	}
}

func TestPromptBlocksChained(t *testing.T) {
	a := PromptBlocks("0123456789abcdef0123456789ABCDEF", 8)
	b := PromptBlocks("0123456789abcdefXXXXXXXXXXXXXXXX", 8)
	if len(a) != 4 || len(b) != 4 {
		t.Fatalf("len = %d,%d", len(a), len(b))
	}
	if a[0] != b[0] || a[1] != b[1] || a[2] == b[2] {
		t.Fatalf("prefix hashing wrong: %x vs %x", a, b)
	}
	// Same block content at a different position hashes differently (chained).
	c := PromptBlocks("0123456701234567", 8)
	if c[0] == c[1] {
		t.Fatal("hashes are not chained")
	}
	if n := len(PromptBlocks("short", 8)); n != 0 {
		t.Fatalf("partial block hashed: %d", n)
	}
}

func TestNewPolicy(t *testing.T) {
	for _, n := range []string{"", PolicyRoundRobin, PolicyLeastLoaded, PolicyKVAware} {
		if _, err := NewPolicy(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	if _, err := NewPolicy("random"); err == nil {
		t.Error("unknown policy accepted")
	}
}
