package evict

import (
	"container/heap"
	"errors"
	"fmt"
)

// ErrUnknown is returned by New and ParseKind for a name that is no policy.
var ErrUnknown = errors.New("evict: unknown policy")

// Meta describes an item as it becomes evictable.
type Meta struct {
	// Group is the sequence number of the request (or release) the item
	// came with; groups are added in increasing order.
	Group uint64
	// Depth is the item's position in its chain (0 = head).
	Depth int
	// Partial marks the last block of a prompt when it is not full: its
	// identity covers only the prompt's last tokens, so a longer prompt
	// (the next turn of a conversation) has a different block there and
	// only the very same prompt can reuse it. TailFirst evicts these first.
	Partial bool
	// Hash is the item's content identity (0: unknown), the same for the
	// same prefix block in every request. Retention recognises with it a
	// group that extends an earlier one; the other policies ignore it.
	Hash uint64
}

// Policy orders evictable items. Add makes an item evictable (re-adding
// one moves it to the most recent position), Remove takes it back into use,
// Victim removes and returns the next item to evict.
type Policy[K comparable] interface {
	Add(k K, m Meta)
	Remove(k K) bool
	Victim() (k K, ok bool)
	Len() int
}

// Kind names a policy.
type Kind string

// The policies.
const (
	KindLRU       Kind = "lru"
	KindTailFirst Kind = "tail-first"
	KindRetention Kind = "retention"
)

// Kinds lists every policy.
var Kinds = []Kind{KindLRU, KindTailFirst, KindRetention}

// ParseKind checks a policy name ("" is LRU).
func ParseKind(s string) (Kind, error) {
	switch Kind(s) {
	case "", KindLRU:
		return KindLRU, nil
	case KindTailFirst, KindRetention:
		return Kind(s), nil
	}
	return "", fmt.Errorf("%w %q (want %q, %q or %q)", ErrUnknown, s, KindLRU, KindTailFirst, KindRetention)
}

// New returns an empty policy of kind k ("" is LRU).
func New[K comparable](k Kind) (Policy[K], error) {
	k, err := ParseKind(string(k))
	if err != nil {
		return nil, err
	}
	switch k {
	case KindTailFirst:
		return NewTailFirst[K](), nil
	case KindRetention:
		return NewRetention[K](), nil
	}
	return NewLRU[K](), nil
}

type node[K comparable] struct {
	k          K
	m          Meta
	seq        uint64 // add order
	prev, next *node[K]
	idx        int // heap index (TailFirst)
}

// LRU evicts the item added longest ago.
type LRU[K comparable] struct {
	head, tail *node[K]
	m          map[K]*node[K]
}

// NewLRU returns an empty LRU.
func NewLRU[K comparable]() *LRU[K] { return &LRU[K]{m: make(map[K]*node[K])} }

// Add appends k as the most recent item.
func (p *LRU[K]) Add(k K, m Meta) {
	p.Remove(k)
	n := &node[K]{k: k, m: m, prev: p.tail}
	if p.tail != nil {
		p.tail.next = n
	} else {
		p.head = n
	}
	p.tail = n
	p.m[k] = n
}

// Remove takes k out; it reports whether k was evictable.
func (p *LRU[K]) Remove(k K) bool {
	n, ok := p.m[k]
	if !ok {
		return false
	}
	p.unlink(n)
	return true
}

func (p *LRU[K]) unlink(n *node[K]) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		p.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		p.tail = n.prev
	}
	delete(p.m, n.k)
}

// Victim removes and returns the least recently added item.
func (p *LRU[K]) Victim() (K, bool) {
	if p.head == nil {
		var zero K
		return zero, false
	}
	n := p.head
	p.unlink(n)
	return n.k, true
}

// Len is the number of evictable items.
func (p *LRU[K]) Len() int { return len(p.m) }

// TailFirst evicts partial tails first (Meta.Partial, oldest group first),
// then the oldest group and, within a group, the deepest item first (ties:
// the item added first).
type TailFirst[K comparable] struct {
	h   tfHeap[K]
	m   map[K]*node[K]
	seq uint64
}

// NewTailFirst returns an empty TailFirst.
func NewTailFirst[K comparable]() *TailFirst[K] { return &TailFirst[K]{m: make(map[K]*node[K])} }

// Add makes k evictable with m (replacing an earlier Add of k).
func (p *TailFirst[K]) Add(k K, m Meta) {
	p.Remove(k)
	p.seq++
	n := &node[K]{k: k, m: m, seq: p.seq}
	p.m[k] = n
	heap.Push(&p.h, n)
}

// Remove takes k out; it reports whether k was evictable.
func (p *TailFirst[K]) Remove(k K) bool {
	n, ok := p.m[k]
	if !ok {
		return false
	}
	heap.Remove(&p.h, n.idx)
	delete(p.m, k)
	return true
}

// Victim removes and returns the next item: oldest group, deepest first.
func (p *TailFirst[K]) Victim() (K, bool) {
	if len(p.h) == 0 {
		var zero K
		return zero, false
	}
	n := heap.Pop(&p.h).(*node[K])
	delete(p.m, n.k)
	return n.k, true
}

// Len is the number of evictable items.
func (p *TailFirst[K]) Len() int { return len(p.m) }

type tfHeap[K comparable] []*node[K]

func (h tfHeap[K]) Len() int { return len(h) }
func (h tfHeap[K]) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.m.Partial != b.m.Partial {
		return a.m.Partial
	}
	if a.m.Group != b.m.Group {
		return a.m.Group < b.m.Group
	}
	if a.m.Depth != b.m.Depth {
		return a.m.Depth > b.m.Depth
	}
	return a.seq < b.seq
}
func (h tfHeap[K]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *tfHeap[K]) Push(x any) {
	n := x.(*node[K])
	n.idx = len(*h)
	*h = append(*h, n)
}
func (h *tfHeap[K]) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return n
}
