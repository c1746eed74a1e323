package kvcache

import (
	"testing"

	"github.com/kvcache-go/mooncake/internal/evict"
)

// TestPoolRetentionKeepsExtendedChain: a block table whose prefix an
// earlier table released (a conversation's second turn) outlives fresh
// single-use tables under Retention; LRU lets them push it out.
func TestPoolRetentionKeepsExtendedChain(t *testing.T) {
	kept := map[evict.Kind]bool{}
	for _, k := range []evict.Kind{evict.KindLRU, evict.KindRetention} {
		p, err := NewPoolWith(8, k)
		if err != nil {
			t.Fatal(err)
		}
		h := func(i int) BlockHash { return BlockHash{byte(i), 1} }
		a, _ := p.Allocate(3)
		for i, id := range a {
			p.SetHash(id, h(i))
		}
		p.Free(a) // first turn
		ids := p.Lookup([]BlockHash{h(0), h(1), h(2)})
		if len(ids) != 3 {
			t.Fatalf("%s: prefix %v", k, ids)
		}
		p.Touch(ids)
		more, _ := p.AllocateFor(1, ids[2], 1)
		p.SetHash(more[0], h(3))
		p.Free(append(ids, more...)) // second turn: extends the first
		for i := range 4 {           // fresh one-block tables fill the rest and evict
			f, err := p.Allocate(2)
			if err != nil {
				t.Fatal(err)
			}
			p.SetHash(f[0], h(10+2*i))
			p.SetHash(f[1], h(11+2*i))
			p.Free(f)
		}
		kept[k] = len(p.Lookup([]BlockHash{h(0), h(1), h(2), h(3)})) == 4
	}
	if kept[evict.KindLRU] || !kept[evict.KindRetention] {
		t.Fatalf("second turn's chain kept: %v", kept)
	}
}
