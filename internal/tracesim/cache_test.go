package tracesim

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func reqs(ids ...[]int64) []Request {
	out := make([]Request, len(ids))
	for i, h := range ids {
		out[i] = Request{Timestamp: int64(i), InputLength: int64(len(h)) * BlockTokens, HashIDs: h}
	}
	return out
}

// sixRequests is worked by hand in TestSimulateCacheHand.
var sixRequests = reqs(
	[]int64{1, 2, 3},
	[]int64{1, 2, 4},
	[]int64{5},
	[]int64{1, 2, 3, 6},
	[]int64{1, 7},
	[]int64{1, 2, 3},
)

// TestSimulateCacheHand checks hit counts worked out by hand.
//
// Unlimited: 0+2+0+3+1+3 = 9 of 16 blocks.
// Capacity 4, after r1..r3 every policy holds {1,2,4,5} (r3 evicts 3:
// LRU oldest; LFU freq 1 and oldest; LengthAware depth 2, older than 4);
// r4 hits 2 and evicts 4 then 5 (the only unpinned blocks); r5 hits 1 and
// must evict one of 2,3,6: LRU evicts 2 (oldest), LFU 3 (freq 1, older
// than 6), LengthAware 6 (deepest). So r6 = [1,2,3] hits 1, 2, 3.
// Capacity 2: r1 caches 1,2 and skips 3 (no unpinned victim); r2 hits 2;
// r3 evicts 1 (LRU: touched before 2); r4 misses 1 and hits 0; r5 and r6
// hit 1 each: 4 for LRU. LFU: r3 evicts 1 or 2 at freq 2 by LRU -> 1, same
// path: 4. LengthAware: r3 evicts 2 (depth 1); r4 hits 1 and caches 2
// over 5; r5 hits 1, evicts 2 (deepest unpinned); r6 hits 1: 0+2+0+1+1+1 = 5.
func TestSimulateCacheHand(t *testing.T) {
	for _, tc := range []struct {
		p        Policy
		capacity int
		hits     int
	}{
		{LRU, Unlimited, 9}, {LFU, Unlimited, 9}, {LengthAware, Unlimited, 9},
		{LRU, 100, 9}, {LFU, 100, 9}, {LengthAware, 100, 9},
		{LRU, 4, 6}, {LFU, 4, 7}, {LengthAware, 4, 8},
		{LRU, 2, 4}, {LFU, 2, 4}, {LengthAware, 2, 5},
	} {
		t.Run(tc.p.String()+"/"+capName(tc.capacity), func(t *testing.T) {
			r := SimulateCache(sixRequests, tc.p, tc.capacity)
			if r.Hits != tc.hits || r.Blocks != 16 || r.Requests != 6 {
				t.Fatalf("got %+v, want %d hits of 16", r, tc.hits)
			}
			if want := float64(tc.hits) / 16; r.HitRate() != want {
				t.Fatalf("hit rate %v, want %v", r.HitRate(), want)
			}
		})
	}
	if h, b := IdealHits(sixRequests); h != 9 || b != 16 {
		t.Fatalf("ideal %d/%d", h, b)
	}
}

func capName(c int) string {
	if c == Unlimited {
		return "inf"
	}
	return strconv.Itoa(c)
}

func TestCacheNeverEvictsCurrentRequest(t *testing.T) {
	for _, p := range Policies {
		t.Run(p.String(), func(t *testing.T) {
			c := NewCache(p, 3)
			c.Access([]int64{3})    // 3 is now the least recent block
			c.Access([]int64{1, 2}) // full: {3, 1, 2}
			// 3 is the natural victim but belongs to this request: the
			// victim is 1 (LRU; LFU: freq 1 and older than 2) or 2
			// (LengthAware: deepest; TailFirst: the tail of {1, 2};
			// Retention: 2 is a partial tail, due at once).
			if hits := c.Access([]int64{4, 3}); hits != 0 {
				t.Fatalf("hits %d", hits)
			}
			if !c.Contains(3) || !c.Contains(4) || c.Len() != 3 || c.Evictions() != 1 {
				t.Fatalf("evicted the request's own block: has3=%v has4=%v len=%d", c.Contains(3), c.Contains(4), c.Len())
			}
			victim := int64(1) // LRU and LFU: oldest / least frequent-oldest
			if p == LengthAware || p == TailFirst || p == Retention {
				victim = 2 // deepest (TailFirst: the tail of the oldest request; Retention: a partial tail)
			}
			if c.Contains(victim) {
				t.Fatalf("block %d should have been evicted", victim)
			}
			// A request larger than the pool keeps its leading blocks.
			c2 := NewCache(p, 2)
			c2.Access([]int64{9})
			if hits := c2.Access([]int64{1, 2, 3, 4}); hits != 0 || !c2.Contains(1) || !c2.Contains(2) || c2.Contains(3) || c2.Len() != 2 {
				t.Fatalf("oversized request: len %d", c2.Len())
			}
			// Repeated ids in one request are harmless.
			if hits := c2.Access([]int64{1, 1, 2, 2}); hits != 4 || c2.Len() != 2 {
				t.Fatalf("repeated ids: hits %d len %d", hits, c2.Len())
			}
		})
	}
}

// synthTrace builds a deterministic conversation-like trace: sessions
// whose turns extend their previous prompt, under a few shared system
// prompts.
func synthTrace(n int, seed uint64) []Request {
	rng := rand.New(rand.NewPCG(seed, 1))
	next := int64(1000)
	var sessions [][]int64
	var out []Request
	for i := range n {
		var ids []int64
		if len(sessions) == 0 || rng.IntN(3) == 0 {
			ids = []int64{int64(rng.IntN(4))} // system prompt
			sessions = append(sessions, ids)
		}
		s := rng.IntN(len(sessions))
		ids = sessions[s]
		for range 1 + rng.IntN(6) {
			ids = append(ids[:len(ids):len(ids)], next)
			next++
		}
		sessions[s] = ids
		out = append(out, Request{Timestamp: int64(i * 10), InputLength: int64(len(ids))*BlockTokens - 7, HashIDs: ids})
	}
	return out
}

func TestUnlimitedEqualsIdeal(t *testing.T) {
	tr := synthTrace(3000, 7)
	hits, blocks := IdealHits(tr)
	if hits == 0 || hits == blocks {
		t.Fatalf("degenerate trace: %d/%d", hits, blocks)
	}
	for _, p := range Policies {
		r := SimulateCache(tr, p, Unlimited)
		if r.Hits != hits || r.Blocks != blocks || r.Evictions != 0 {
			t.Fatalf("%v: %d/%d, ideal %d/%d", p, r.Hits, r.Blocks, hits, blocks)
		}
		if small := SimulateCache(tr, p, 50); small.Hits >= hits || small.Evictions == 0 {
			t.Fatalf("%v at 50 blocks: %+v not below ideal %d", p, small, hits)
		}
	}
}

func TestPaperTable(t *testing.T) {
	if v, ok := PaperHitRate(LRU, 10000); !ok || v != 0.40 {
		t.Fatalf("LRU 10000 = %v %v", v, ok)
	}
	if v, ok := PaperHitRate(LengthAware, Unlimited); !ok || v != 0.51 {
		t.Fatalf("LengthAware inf = %v %v", v, ok)
	}
	if _, ok := PaperHitRate(LFU, 1234); ok {
		t.Fatal("no such column")
	}
	if _, ok := PaperHitRate(Policy(9), 1000); ok {
		t.Fatal("no such policy")
	}
}

// TestRealTrace uses the conversation trace when it sits next to the
// repository (it is not part of it); skipped elsewhere.
func TestRealTrace(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "..", "shared", "traces", "conversation_trace.jsonl"))
	if err != nil {
		t.Skipf("no real trace: %v", err)
	}
	defer f.Close()
	tr, err := ReadAll(f, 2000)
	if err != nil || len(tr.Requests) != 2000 || tr.Stats.LengthMismatch != 0 {
		t.Fatalf("read: %v, %d requests, stats %+v", err, len(tr.Requests), tr.Stats)
	}
	hits, blocks := IdealHits(tr.Requests)
	ideal := float64(hits) / float64(blocks)
	for _, p := range Policies {
		if r := SimulateCache(tr.Requests, p, Unlimited); r.Hits != hits {
			t.Fatalf("%v unlimited %d != ideal %d", p, r.Hits, hits)
		}
		if r := SimulateCache(tr.Requests, p, 1000); r.HitRate() >= ideal {
			t.Fatalf("%v at 1000 blocks %.3f >= ideal %.3f", p, r.HitRate(), ideal)
		}
	}
	cfg := DefaultRouteConfig()
	rr, err := SimulateRouting(tr.Requests, RoundRobin, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cd, err := SimulateRouting(tr.Requests, Conductor, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cd.HitRate() <= rr.HitRate() || cd.MeanTTFT >= rr.MeanTTFT {
		t.Fatalf("conductor %+v not better than round-robin %+v", cd, rr)
	}
	t.Logf("2000 requests: ideal %.4f; round-robin hit %.4f mean TTFT %.3fs; conductor hit %.4f mean TTFT %.3fs",
		ideal, rr.HitRate(), rr.MeanTTFT, cd.HitRate(), cd.MeanTTFT)
}
