package tracesim

import (
	"os"
	"path/filepath"
	"testing"
)

// TestClassCeilingHandWorked: r0 [1 2 3], r1 [7 .. 12] (nothing reused),
// r2 [1 2 4] (r0's next turn); 12 insertions. Blocks 1 and 2 of r0 are
// next used 9 insertions later; they share their classes (turn 0, not seen
// before, 3-6 new blocks, depths 0 and 1) with r1's blocks 7 and 8, never
// used again and held to the trace's end, 9 insertions. So each class
// buys 1 hit for 18/12 of a block on average: 1 block of capacity gives
// 2/3 of a hit (0), 2 blocks 4/3 (1), 3 blocks both hits.
func TestClassCeilingHandWorked(t *testing.T) {
	reqs := []Request{
		{Timestamp: 0, HashIDs: []int64{1, 2, 3}},
		{Timestamp: 1, HashIDs: []int64{7, 8, 9, 10, 11, 12}},
		{Timestamp: 2, HashIDs: []int64{1, 2, 4}},
	}
	for _, c := range []struct{ capacity, hits int }{{1, 0}, {2, 1}, {3, 2}, {100, 2}, {Unlimited, 2}} {
		r := SimulateCache(reqs, ClassCeiling, c.capacity)
		if r.Hits != c.hits || r.Blocks != 12 || r.Requests != 3 || r.Policy != ClassCeiling {
			t.Errorf("capacity %d: %+v, want %d hits", c.capacity, r, c.hits)
		}
	}
}

// TestClassCeilingBounds: on a generated agent trace the ceiling grows
// with the capacity, stays at or below the ideal, and lies at or above
// LRU, TailFirst and Retention (they know less than its classes).
func TestClassCeilingBounds(t *testing.T) {
	s := DefaultAgentShape()
	s.Tasks = 400
	reqs := GenerateAgent(s, 3)
	ideal, _ := IdealHits(reqs)
	prev := -1
	for _, c := range []int{200, 1000, 4000, 20000, Unlimited} {
		ceil := SimulateClassCeiling(reqs, c)
		if ceil.Hits < prev || ceil.Hits > ideal {
			t.Fatalf("capacity %d: ceiling %d hits (previous %d, ideal %d)", c, ceil.Hits, prev, ideal)
		}
		prev = ceil.Hits
		if c == Unlimited {
			if ceil.Hits != ideal {
				t.Fatalf("unlimited: %d hits, ideal %d", ceil.Hits, ideal)
			}
			continue
		}
		for _, p := range []Policy{LRU, TailFirst, Retention} {
			if r := SimulateCache(reqs, p, c); r.Hits > ceil.Hits {
				t.Errorf("capacity %d: %s %.4f above the class ceiling %.4f", c, p, r.HitRate(), ceil.HitRate())
			}
		}
	}
}

// TestClassCeilingOnRealTrace (when the conversation trace sits next to
// the repository; skipped with -short): at 10,000 and 20,000 blocks the
// class ceiling lies between Retention and Belady, and below LRU + half
// of the gap to Belady: no policy that knows a block only by these
// classes closes half of it.
func TestClassCeilingOnRealTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	f, err := os.Open(filepath.Join("..", "..", "..", "shared", "traces", "conversation_trace.jsonl"))
	if err != nil {
		if f, err = os.Open(filepath.Join("..", "..", "..", "..", "shared", "traces", "conversation_trace.jsonl")); err != nil {
			t.Skipf("no real trace: %v", err)
		}
	}
	defer f.Close()
	tr, err := ReadAll(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []int{10000, 20000} {
		lru := SimulateCache(tr.Requests, LRU, c).HitRate()
		ret := SimulateCache(tr.Requests, Retention, c).HitRate()
		opt := SimulateBelady(tr.Requests, c).HitRate()
		ceil := SimulateClassCeiling(tr.Requests, c).HitRate()
		t.Logf("%d blocks: LRU %.4f Retention %.4f class ceiling %.4f Belady %.4f", c, lru, ret, ceil, opt)
		if ceil < ret || ceil > opt || ceil >= lru+(opt-lru)/2 {
			t.Errorf("%d blocks: class ceiling %.4f outside [Retention %.4f, min(Belady %.4f, halfway %.4f))", c, ceil, ret, opt, lru+(opt-lru)/2)
		}
	}
}
