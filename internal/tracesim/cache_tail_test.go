package tracesim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvcache-go/mooncake/internal/evict"
)

// coreHits replays reqs with the same rules as Cache.Access, but with the
// eviction order kept by an internal/evict policy (each request one group,
// each block its position as depth).
func coreHits(reqs []Request, pol evict.Policy[int64], capacity int) (hits int) {
	gen := map[int64]uint64{} // cached block -> latest request that touched it
	var g uint64
	type add struct {
		id      int64
		depth   int
		partial bool
	}
	var pinned []add
	for _, r := range Ordered(reqs) {
		ids := r.HashIDs
		for _, id := range ids {
			if _, ok := gen[id]; !ok {
				break
			}
			hits++
		}
		g++
		pinned = pinned[:0]
		for pos, id := range ids {
			if last, ok := gen[id]; ok && last != g {
				pol.Remove(id)
				gen[id] = g
				pinned = append(pinned, add{id, pos, pos == len(ids)-1})
			}
		}
		for pos, id := range ids {
			if _, ok := gen[id]; ok {
				continue
			}
			if len(gen) >= capacity {
				v, ok := pol.Victim()
				if !ok {
					continue
				}
				delete(gen, v)
			}
			gen[id] = g
			pinned = append(pinned, add{id, pos, pos == len(ids)-1})
		}
		for _, a := range pinned {
			pol.Add(a.id, evict.Meta{Group: g, Depth: a.depth, Partial: a.partial})
		}
	}
	return hits
}

// TestCacheMatchesEvictCore: tracesim's LRU and TailFirst orders are the
// ones of internal/evict, so the engine's pool and the simulation agree.
func TestCacheMatchesEvictCore(t *testing.T) {
	tr := synthTrace(3000, 11)
	for _, tc := range []struct {
		p Policy
		k evict.Kind
	}{{LRU, evict.KindLRU}, {TailFirst, evict.KindTailFirst}} {
		for _, c := range []int{20, 50, 200, 1000} {
			pol, err := evict.New[int64](tc.k)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := coreHits(tr, pol, c), SimulateCache(tr, tc.p, c).Hits; got != want {
				t.Fatalf("%v at %d blocks: evict core %d hits, tracesim %d", tc.p, c, got, want)
			}
		}
	}
}

// TestTailFirstKeepsChains: a full pool evicts the tail of the older chain,
// not its head, so the older prompt's prefix still hits.
func TestTailFirstKeepsChains(t *testing.T) {
	c := NewCache(TailFirst, 4)
	c.Access([]int64{1, 2, 3})
	c.Access([]int64{9, 8}) // evicts 3, the tail of 1-2-3
	if !c.Contains(1) || !c.Contains(2) || c.Contains(3) {
		t.Fatalf("tail-first kept the wrong blocks")
	}
	if hits := c.Access([]int64{1, 2, 5}); hits != 2 {
		t.Fatalf("hits %d, want 2", hits)
	}
	l := NewCache(LRU, 4)
	l.Access([]int64{1, 2, 3})
	l.Access([]int64{9, 8}) // LRU evicts 1, the head: 2 and 3 are now dead
	if hits := l.Access([]int64{1, 2, 5}); hits != 0 {
		t.Fatalf("LRU hits %d, want 0", hits)
	}
}

// TestTailFirstBeatsLRUOnRealTrace runs the whole conversation trace when
// it sits next to the repository (../shared, or ../../shared from a
// worktree); skipped elsewhere (and with -short). Retention must beat
// both at 10,000 blocks.
func TestTailFirstBeatsLRUOnRealTrace(t *testing.T) {
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
	for _, c := range []int{10000, 5000} {
		lru, tf := SimulateCache(tr.Requests, LRU, c), SimulateCache(tr.Requests, TailFirst, c)
		if tf.Hits <= lru.Hits {
			t.Fatalf("%d blocks: TailFirst %.4f not above LRU %.4f", c, tf.HitRate(), lru.HitRate())
		}
		t.Logf("%d blocks: LRU %.4f TailFirst %.4f", c, lru.HitRate(), tf.HitRate())
		if c == 10000 { // Retention: one capacity, to keep the test short
			if rt := SimulateCache(tr.Requests, Retention, c); rt.Hits <= tf.Hits {
				t.Fatalf("%d blocks: Retention %.4f not above TailFirst %.4f", c, rt.HitRate(), tf.HitRate())
			}
		}
	}
}

// TestAccessPrefixHasNoPartialTail: a pulled prefix's last block is a full
// block, so TailFirst does not drop it as a partial tail; after Access it
// does.
func TestAccessPrefixHasNoPartialTail(t *testing.T) {
	for _, prefix := range []bool{true, false} {
		c := NewCache(TailFirst, 4)
		c.Access([]int64{7, 8}) // 8 is a partial tail
		if prefix {
			c.AccessPrefix([]int64{1, 2})
		} else {
			c.Access([]int64{1, 2})
		}
		c.Access([]int64{9, 10}) // evicts 8, then 2 if partial, else 7
		if got := c.Contains(2); got != prefix {
			t.Fatalf("prefix %v: block 2 cached %v", prefix, got)
		}
	}
}
