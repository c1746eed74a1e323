package evict

import "container/heap"

// retentionTurns is the number of turn classes: chains extended 0, 1, 2,
// and 3 or more times (a saturating counter).
const retentionTurns = 4

// retentionHistory: a chain's turn is remembered for this many pool sizes
// of insertions after its last request, whether or not its blocks are
// still cached.
const retentionHistory = 8

// Retention keeps a block longer the more often it, or the chain it ends,
// has come back. Each group (one request's blocks) gets a turn: 0 for a
// chain seen for the first time, t+1 for a group whose blocks, past the
// head, include the deepest full block of a group of turn t (the next turn
// of a conversation carries the previous prompt whole). Each item's level
// is the larger of its group's turn and the times the item itself came
// back while cached (a shared system or tool prompt that many chains
// reuse), capped at 3. An item of level l may stay (l+1) pool sizes of
// insertions (Add calls; the pool's size is the largest Len so far, or
// SetCapacity's if larger) from its group's insertion; partial tails
// (Meta.Partial) may stay no time at all. The victim is the item due
// first (ties: the older group, then the deeper item), so a chain shrinks
// from its tail: its head has come back at least as often as its tail.
//
// Why: on Mooncake's conversation trace the chance that a prompt gets a
// next turn rises with the turns it already had (0.31 after the first,
// 0.77 after the seventh), and the wait for it is about the same for
// every turn, so the same space buys more hits when spent on older
// conversations. The unit, one pool size of insertions per level, is the
// pool's own scale; nothing in it is fitted to a trace.
//
// Memory beyond the items: one identity (Meta.Hash) per group, kept
// retentionHistory pool sizes of insertions, and the use count of items
// taken into use until they come back. Items without an identity (Hash 0)
// have turn 0; then only their own comebacks lift them.
type Retention[K comparable] struct {
	q       [1 + retentionTurns]rHeap[K] // partial tails, then turns 0..3+
	m       map[K]*rNode[K]              // nil: in the current group, not yet placed
	now     uint64                       // Add calls so far
	seq     uint64
	capHigh int // the largest Len so far
	size    int // the pool's size, if its owner told it (SetCapacity)

	group    uint64
	groupSet bool
	pending  []rPending[K]    // the current group's items, placed when it ends
	turns    map[uint64]rTurn // deepest full block of a recent group -> its turn
	fifo     []rTurnAt        // turns entries by insertion, for expiry
	fifoHead int
	taken    map[K]uint8 // items Removed (taken into use) -> their uses, until added back
}

type rNode[K comparable] struct {
	k     K
	group uint64
	due   uint64 // insertion time + allowance: the smaller, the sooner evicted
	seq   uint64
	depth int
	cls   uint8
	uses  uint8 // times the item came back while cached (saturating)
	idx   int
}

type rPending[K comparable] struct {
	k    K
	m    Meta
	uses uint8
}

type rTurn struct {
	at   uint64
	turn uint8
}

type rTurnAt struct {
	h  uint64
	at uint64
}

// NewRetention returns an empty Retention.
func NewRetention[K comparable]() *Retention[K] {
	return &Retention[K]{m: make(map[K]*rNode[K]), turns: make(map[uint64]rTurn), taken: make(map[K]uint8)}
}

// SetCapacity tells the policy the pool's size in items; the pool size is
// then the larger of n and the largest Len so far. Without it a pool that
// is still filling up counts as small, and its allowances are short.
func (p *Retention[K]) SetCapacity(n int) { p.size = n }

func (p *Retention[K]) unit() int { return max(p.capHigh, p.size, 1) }

// Add makes k evictable with m (replacing an earlier Add of k). The items
// of one group are placed together when the group ends: at the next
// group's first Add, or at any Remove or Victim.
func (p *Retention[K]) Add(k K, m Meta) {
	p.Remove(k)
	if p.groupSet && m.Group != p.group {
		p.flush()
	}
	p.group, p.groupSet = m.Group, true
	p.now++
	var uses uint8
	if u, ok := p.taken[k]; ok {
		uses = min(u, 254) + 1
		delete(p.taken, k)
	}
	p.pending = append(p.pending, rPending[K]{k, m, uses})
	p.m[k] = nil
	p.capHigh = max(p.capHigh, len(p.m))
}

// flush gives the current group its turn and places its items.
func (p *Retention[K]) flush() {
	if !p.groupSet {
		return
	}
	p.groupSet = false
	if len(p.pending) == 0 {
		return
	}
	p.expire()
	turn, matchAt, deepestAt := 0, -1, -1
	var deepest uint64
	single := len(p.pending) == 1
	for _, it := range p.pending {
		if it.m.Hash == 0 {
			continue
		}
		// A chain extends another through a block past its head (a root
		// shared by every request says nothing), unless it is one block.
		if t, ok := p.turns[it.m.Hash]; ok && (it.m.Depth > 0 || single) && it.m.Depth > matchAt {
			turn, matchAt = int(t.turn)+1, it.m.Depth
		}
		if !it.m.Partial && it.m.Depth > deepestAt {
			deepest, deepestAt = it.m.Hash, it.m.Depth
		}
	}
	turn = min(turn, retentionTurns-1)
	if deepestAt >= 0 {
		p.turns[deepest] = rTurn{at: p.now, turn: uint8(turn)}
		p.fifo = append(p.fifo, rTurnAt{h: deepest, at: p.now})
	}
	start := p.now - uint64(len(p.pending)) + 1
	unit := uint64(p.unit())
	for i, it := range p.pending {
		t := max(turn, min(int(it.uses), retentionTurns-1))
		cls, due := uint8(1+t), start+uint64(t+1)*unit
		if it.m.Partial {
			cls, due = 0, start
		}
		p.seq++
		n := &rNode[K]{k: it.k, group: it.m.Group, due: due, seq: p.seq, depth: it.m.Depth, cls: cls, uses: it.uses}
		p.m[it.k] = n
		heap.Push(&p.q[cls], n)
		p.pending[i] = rPending[K]{}
	}
	p.pending = p.pending[:0]
}

// expire forgets the turns recorded more than retentionHistory pool sizes
// of insertions ago.
func (p *Retention[K]) expire() {
	h := uint64(retentionHistory * max(p.unit(), 64))
	for p.fifoHead < len(p.fifo) && p.now-p.fifo[p.fifoHead].at >= h {
		e := p.fifo[p.fifoHead]
		p.fifoHead++
		if t, ok := p.turns[e.h]; ok && t.at == e.at {
			delete(p.turns, e.h)
		}
	}
	if p.fifoHead > 1024 && p.fifoHead*2 > len(p.fifo) {
		p.fifo = append(p.fifo[:0], p.fifo[p.fifoHead:]...)
		p.fifoHead = 0
	}
}

// Remove takes k out; it reports whether k was evictable.
func (p *Retention[K]) Remove(k K) bool {
	n, ok := p.m[k]
	if !ok {
		return false
	}
	if n == nil { // in the current group
		p.flush()
		n = p.m[k]
	}
	heap.Remove(&p.q[n.cls], n.idx)
	delete(p.m, k)
	if len(p.taken) >= 2*p.unit()+1024 { // taken items never added back
		clear(p.taken)
	}
	p.taken[k] = n.uses
	return true
}

// Victim removes and returns the next item: of the classes' heads, the
// one due first (ties: the older group, then the lower class), and within
// its group the deepest item first.
func (p *Retention[K]) Victim() (K, bool) {
	p.flush()
	best := -1
	var bestDue, bestGroup uint64
	for c := range p.q {
		if len(p.q[c]) == 0 {
			continue
		}
		h := p.q[c][0]
		if best < 0 || h.due < bestDue || (h.due == bestDue && h.group < bestGroup) {
			best, bestDue, bestGroup = c, h.due, h.group
		}
	}
	if best < 0 {
		var zero K
		return zero, false
	}
	n := heap.Pop(&p.q[best]).(*rNode[K])
	delete(p.m, n.k)
	return n.k, true
}

// Len is the number of evictable items.
func (p *Retention[K]) Len() int { return len(p.m) }

// rHeap orders one class: the item due first, then the older group, the
// deeper item, the item added first.
type rHeap[K comparable] []*rNode[K]

func (h rHeap[K]) Len() int { return len(h) }
func (h rHeap[K]) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.due != b.due {
		return a.due < b.due
	}
	if a.group != b.group {
		return a.group < b.group
	}
	if a.depth != b.depth {
		return a.depth > b.depth
	}
	return a.seq < b.seq
}
func (h rHeap[K]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *rHeap[K]) Push(x any) {
	n := x.(*rNode[K])
	n.idx = len(*h)
	*h = append(*h, n)
}
func (h *rHeap[K]) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return n
}
