package engine

import (
	"testing"

	"github.com/kvcache-go/mooncake/internal/kvcache"
)

type recEvents struct {
	stored  [][]kvcache.BlockHash
	parents []*kvcache.BlockHash
	tokens  [][]int
	removed []kvcache.BlockHash
	cleared int
}

func (r *recEvents) BlockStored(h []kvcache.BlockHash, p *kvcache.BlockHash, toks []int) {
	r.stored, r.parents, r.tokens = append(r.stored, h), append(r.parents, p), append(r.tokens, toks)
}
func (r *recEvents) BlockRemoved(h []kvcache.BlockHash) { r.removed = append(r.removed, h...) }
func (r *recEvents) AllBlocksCleared()                  { r.cleared++ }

// The prefix cache's changes come out as vLLM's KV events: every stored
// block once, chained by parent, with its tokens; evictions as removals.
func TestKVEventsHooks(t *testing.T) {
	ev := &recEvents{}
	e := newEngine(t, func(c *Config) { c.KVEvents = ev; c.NumBlocks = 8 })
	if ev.cleared != 1 {
		t.Fatalf("cleared %d at start, want 1", ev.cleared)
	}
	p := prompt(50, 1) // 3 full blocks of 16
	runToEnd(t, e, submit(t, e, greedy("a", p, 2)))
	var got []kvcache.BlockHash
	var toks []int
	for i, hs := range ev.stored {
		if i > 0 && (ev.parents[i] == nil || *ev.parents[i] != got[len(got)-1]) {
			t.Fatalf("event %d parent %v", i, ev.parents[i])
		}
		got = append(got, hs...)
		toks = append(toks, ev.tokens[i]...)
	}
	want := kvcache.HashBlocks("", 16, p)
	if len(got) != 3 || ev.parents[0] != nil || got[0] != want[0] || got[2] != want[2] || !equalInts(toks, p[:48]) {
		t.Fatalf("stored %d blocks (want 3: %v), tokens %d", len(got), got, len(toks))
	}
	// The same prompt again stores nothing new.
	n := len(ev.stored)
	runToEnd(t, e, submit(t, e, greedy("b", p, 2)))
	if len(ev.stored) != n {
		t.Fatalf("a cache hit published %d more stored events", len(ev.stored)-n)
	}
	// Another 8-block prompt needs every block: the cached ones are evicted.
	runToEnd(t, e, submit(t, e, greedy("c", prompt(120, 2), 2)))
	if len(ev.removed) != 3 {
		t.Fatalf("removed %d, want the 3 cached blocks", len(ev.removed))
	}
}

func equalInts(a, b []int) bool {
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
