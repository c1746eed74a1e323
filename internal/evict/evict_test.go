package evict

import (
	"errors"
	"testing"
)

// TestPolicyBehaviour is the contract every policy meets.
func TestPolicyBehaviour(t *testing.T) {
	for _, k := range Kinds {
		t.Run(string(k), func(t *testing.T) {
			mk := func() Policy[int] {
				p, err := New[int](k)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			p := mk()
			if _, ok := p.Victim(); ok || p.Len() != 0 {
				t.Fatal("empty policy gave a victim")
			}
			// Two groups: older group leaves entirely before the newer one.
			for d, id := range []int{10, 11, 12} {
				p.Add(id, Meta{Group: 1, Depth: d})
			}
			for d, id := range []int{20, 21} {
				p.Add(id, Meta{Group: 2, Depth: d})
			}
			if p.Len() != 5 {
				t.Fatalf("Len %d, want 5", p.Len())
			}
			// Remove takes an item out; a second Remove reports false.
			if !p.Remove(11) || p.Remove(11) || p.Remove(99) {
				t.Fatal("Remove results wrong")
			}
			seen := map[int]bool{}
			var order []int
			for {
				id, ok := p.Victim()
				if !ok {
					break
				}
				if seen[id] {
					t.Fatalf("victim %d twice", id)
				}
				seen[id] = true
				order = append(order, id)
			}
			if len(order) != 4 || p.Len() != 0 {
				t.Fatalf("victims %v", order)
			}
			for i, id := range order {
				if (i < 2) != (id < 20) {
					t.Fatalf("victims %v: group 1 must leave before group 2", order)
				}
			}
			// Re-adding moves an item to the newest position.
			p = mk()
			p.Add(1, Meta{Group: 1})
			p.Add(2, Meta{Group: 2})
			p.Add(1, Meta{Group: 3})
			if v, _ := p.Victim(); v != 2 {
				t.Fatalf("victim %d, want 2 after re-adding 1", v)
			}
			if p.Len() != 1 {
				t.Fatalf("Len %d after re-add, want 1", p.Len())
			}
		})
	}
}

func TestOrderWithinGroup(t *testing.T) {
	for _, tc := range []struct {
		k    Kind
		want []int
	}{
		{KindLRU, []int{0, 1, 2}},       // added first, evicted first: the head
		{KindTailFirst, []int{2, 1, 0}}, // the tail first
	} {
		p, _ := New[int](tc.k)
		for d := range 3 {
			p.Add(d, Meta{Group: 7, Depth: d})
		}
		for _, w := range tc.want {
			if v, _ := p.Victim(); v != w {
				t.Fatalf("%s: victim %d, want %d", tc.k, v, w)
			}
		}
	}
}

func TestParseKind(t *testing.T) {
	if k, err := ParseKind(""); err != nil || k != KindLRU {
		t.Fatal(k, err)
	}
	if _, err := New[int]("mru"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("err %v", err)
	}
}

func TestTailFirstPartialFirst(t *testing.T) {
	p := NewTailFirst[int]()
	p.Add(1, Meta{Group: 1, Depth: 0})
	p.Add(2, Meta{Group: 1, Depth: 1})
	p.Add(3, Meta{Group: 2, Depth: 0})
	p.Add(4, Meta{Group: 2, Depth: 1, Partial: true})
	for _, w := range []int{4, 2, 1, 3} { // the newer partial tail first
		if v, _ := p.Victim(); v != w {
			t.Fatalf("victim %d, want %d", v, w)
		}
	}
}
