package evict

import "testing"

// request adds one group the way a pool releases a request: its blocks in
// prompt order, the last one a partial tail when partial is set.
func request(p Policy[int], g uint64, partial bool, ids ...int) {
	for d, id := range ids {
		p.Add(id, Meta{Group: g, Depth: d, Partial: partial && d == len(ids)-1, Hash: uint64(id) + 1})
	}
}

func drain(p Policy[int]) []int {
	var out []int
	for {
		v, ok := p.Victim()
		if !ok {
			return out
		}
		out = append(out, v)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// primed returns a Retention whose pool size (largest Len) is n, empty.
func primed(n int) *Retention[int] {
	p := NewRetention[int]()
	for i := range n {
		p.Add(-1-i, Meta{Group: 0})
	}
	drain(p)
	return p
}

// TestRetentionTurns: a chain that was extended (a second turn) outlives a
// newer chain seen once, partial tails go first, and inside a group the
// tail leaves before the head.
func TestRetentionTurns(t *testing.T) {
	p := primed(100)
	request(p, 1, true, 0, 1, 2, 3)    // turn 0: 3 is a partial tail
	request(p, 2, true, 0, 1, 2, 4, 5) // extends 1-2 (its deepest full block): turn 1
	request(p, 3, true, 0, 6, 7, 8)    // a new chain: turn 0
	request(p, 4, false, 0, 9, 10, 11) // a new chain, no partial tail: turn 0
	// Order: partial tails by age (3, 5, 8), then the turn-0 groups by
	// age, deepest first (7, 6, then 11, 10, 9), then the turn-1 group
	// (4, 2, 1: 1 and 2 came back once, as its turn), and last block 0,
	// the shared root, which came back three times.
	want := []int{3, 5, 8, 7, 6, 11, 10, 9, 4, 2, 1, 0}
	if got := drain(p); !equal(got, want) {
		t.Fatalf("victims %v, want %v", got, want)
	}
}

// TestRetentionAllowanceExpires: in a full pool of 10 fed one fresh block
// per request, a turn-1 chain stays about 2 pool sizes of insertions (its
// allowance), where LRU drops it after 10.
func TestRetentionAllowanceExpires(t *testing.T) {
	for _, tc := range []struct {
		k        Kind
		min, max int // insertions the chain survives
	}{{KindLRU, 7, 10}, {KindRetention, 13, 21}} {
		p, _ := New[int](tc.k)
		if tc.k == KindRetention {
			p = primed(10)
		}
		request(p, 1, false, 100, 101)
		request(p, 2, false, 100, 101, 102) // turn 1
		gone := -1
		for i := 0; i < 40 && gone < 0; i++ {
			request(p, uint64(3+i), false, 1000+i)
			for p.Len() > 10 {
				if v, _ := p.Victim(); v >= 100 && v <= 102 {
					gone = i
				}
			}
		}
		if gone < tc.min || gone > tc.max {
			t.Fatalf("%s: the extended chain left after %d insertions, want %d..%d", tc.k, gone, tc.min, tc.max)
		}
	}
}

// TestRetentionWithoutHash: without identities every group is turn 0 and
// the order is the oldest group first, deepest first (group 1's blocks
// all moved to group 2).
func TestRetentionWithoutHash(t *testing.T) {
	p := NewRetention[int]()
	for g, ids := range [][]int{{1, 2, 3}, {1, 2, 3, 4}, {5, 6}} {
		for d, id := range ids {
			p.Add(id, Meta{Group: uint64(g + 1), Depth: d})
		}
	}
	if got, want := drain(p), []int{4, 3, 2, 1, 6, 5}; !equal(got, want) {
		t.Fatalf("victims %v, want %v", got, want)
	}
}

// TestRetentionRemovePending: Remove of an item of the group still being
// added takes it out, and the rest of the group stays.
func TestRetentionRemovePending(t *testing.T) {
	p := NewRetention[int]()
	request(p, 1, false, 1, 2, 3)
	if !p.Remove(2) || p.Remove(2) || p.Len() != 2 {
		t.Fatalf("remove of a pending item: len %d", p.Len())
	}
	if got := drain(p); !equal(got, []int{3, 1}) {
		t.Fatalf("victims %v", got)
	}
}

// TestRetentionSharedPrefix: a prompt prefix that many new chains reuse
// (a tool prompt) outlives the chains' own blocks, though every chain is
// turn 0.
func TestRetentionSharedPrefix(t *testing.T) {
	p := primed(100)
	for g := range 4 {
		request(p, uint64(g+1), false, 1, 2, 100+g) // shared 1-2, then the chain's own block
	}
	got := drain(p)
	if !equal(got[len(got)-2:], []int{2, 1}) || len(got) != 6 {
		t.Fatalf("victims %v: the shared prefix 1-2 must leave last, tail first", got)
	}
}

// TestPolicyRandomOps drives every policy with random Adds (groups of
// growing numbers, re-adds included), Removes and Victims against a plain
// set: Remove reports membership, Victim returns a member, Len is the
// set's size, and draining returns every member once.
func TestPolicyRandomOps(t *testing.T) {
	for _, k := range Kinds {
		t.Run(string(k), func(t *testing.T) {
			p, _ := New[int](k)
			set := map[int]bool{}
			rng := uint64(12345)
			next := func(n int) int {
				rng ^= rng << 13
				rng ^= rng >> 7
				rng ^= rng << 17
				return int(rng % uint64(n))
			}
			var g uint64
			for range 20000 {
				switch next(4) {
				case 0, 1:
					g++
					for d := range 1 + next(6) {
						id := next(300)
						p.Add(id, Meta{Group: g, Depth: d, Partial: next(5) == 0, Hash: uint64(id) + 1})
						set[id] = true
					}
				case 2:
					id := next(300)
					if got := p.Remove(id); got != set[id] {
						t.Fatalf("Remove(%d) = %v, member %v", id, got, set[id])
					}
					delete(set, id)
				case 3:
					v, ok := p.Victim()
					if ok != (len(set) > 0) || (ok && !set[v]) {
						t.Fatalf("Victim() = %d, %v with %d members", v, ok, len(set))
					}
					delete(set, v)
				}
				if p.Len() != len(set) {
					t.Fatalf("Len %d, set %d", p.Len(), len(set))
				}
			}
			for len(set) > 0 {
				v, ok := p.Victim()
				if !ok || !set[v] {
					t.Fatalf("drain: %d, %v", v, ok)
				}
				delete(set, v)
			}
			if _, ok := p.Victim(); ok || p.Len() != 0 {
				t.Fatal("not empty after drain")
			}
		})
	}
}
