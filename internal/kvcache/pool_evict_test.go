package kvcache

import (
	"errors"
	"testing"

	"github.com/kvcache-go/mooncake/internal/evict"
)

// TestPoolEvictionKinds: with either order, a released block table loses
// its tail first, so its head still serves a prefix hit; an older release
// goes before a newer one.
func TestPoolEvictionKinds(t *testing.T) {
	for _, k := range evict.Kinds {
		t.Run(string(k), func(t *testing.T) {
			p, err := NewPoolWith(6, k)
			if err != nil {
				t.Fatal(err)
			}
			hs := []BlockHash{{1}, {2}, {3}, {4}, {5}, {6}}
			a, _ := p.Allocate(3)
			b, _ := p.Allocate(3)
			for i, id := range append(append([]int{}, a...), b...) {
				p.SetHash(id, hs[i])
			}
			p.Free(a) // older release
			p.Free(b)
			if p.NumCached() != 6 || p.NumFree() != 6 {
				t.Fatalf("cached %d free %d", p.NumCached(), p.NumFree())
			}
			got, _ := p.Allocate(2) // evicts a's tail, then its middle
			if got[0] != a[1] || got[1] != a[2] {
				t.Fatalf("evicted %v, want %v (tail of the older table)", got, a[1:])
			}
			if ids := p.Lookup(hs[:3]); len(ids) != 1 || ids[0] != a[0] {
				t.Fatalf("prefix of a: %v, want [%d]", ids, a[0])
			}
			if ids := p.Lookup(hs[3:]); len(ids) != 3 {
				t.Fatalf("b lost blocks: %v", ids)
			}
		})
	}
	if _, err := NewPoolWith(4, "mru"); !errors.Is(err, evict.ErrUnknown) {
		t.Fatalf("unknown kind: %v", err)
	}
}
