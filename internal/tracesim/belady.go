package tracesim

import (
	"container/heap"
	"math"
)

// SimulateBelady replays reqs through one global pool of capacity blocks
// under Belady's offline rule: when a block must leave, the cached block
// whose next use (the next request, in timestamp order, that holds it) is
// farthest goes first; blocks never used again first of all, and among
// equal next uses the deepest block (its position in its latest request)
// first, so a chain shrinks from its tail. The rules are SimulateCache's
// (leading hits; a request's own blocks are not evicted for its other
// blocks), but the replay is its own code: it shares no cache structure
// with the online policies it is the yardstick for. It knows the future,
// so no real pool can run it; its hit rate is the reference the online
// policies are measured against (the optimum for per-block eviction).
// Unlimited gives the ideal.
func SimulateBelady(reqs []Request, capacity int) CacheResult {
	ordered := Ordered(reqs)
	res := CacheResult{Capacity: max(capacity, Unlimited), Policy: Belady}
	// uses[id]: the request indices holding id, ascending; cursor[id]: how
	// many of them are past.
	uses := make(map[int64][]int32)
	for i, r := range ordered {
		for _, id := range r.HashIDs {
			u := uses[id]
			if len(u) == 0 || u[len(u)-1] != int32(i) {
				uses[id] = append(u, int32(i))
			}
		}
	}
	cursor := make(map[int64]int, len(uses))
	cached := make(map[int64]*bNode)
	var h bHeap
	var pinned []*bNode
	for i, r := range ordered {
		ids := r.HashIDs
		res.Requests++
		res.Blocks += len(ids)
		for _, id := range ids {
			if _, ok := cached[id]; !ok {
				break
			}
			res.Hits++
		}
		pinned = pinned[:0]
		for _, id := range ids {
			if n, ok := cached[id]; ok && n.idx >= 0 {
				heap.Remove(&h, n.idx)
				n.idx = -1
				pinned = append(pinned, n)
			}
		}
		for pos, id := range ids {
			n, ok := cached[id]
			if !ok {
				if capacity != Unlimited && len(cached) >= capacity {
					if h.Len() == 0 {
						continue
					}
					v := heap.Pop(&h).(*bNode)
					delete(cached, v.id)
					res.Evictions++
				}
				n = &bNode{id: id, idx: -1}
				cached[id] = n
				pinned = append(pinned, n)
			}
			if n.gen != i+1 { // a repeated id keeps its first position
				n.gen, n.depth = i+1, pos
			}
		}
		for _, n := range pinned {
			u := uses[n.id]
			c := cursor[n.id]
			for c < len(u) && int(u[c]) <= i {
				c++
			}
			cursor[n.id] = c
			n.next = math.MaxInt32
			if c < len(u) {
				n.next = int(u[c])
			}
			heap.Push(&h, n)
		}
	}
	return res
}

type bNode struct {
	id    int64
	next  int // index of the next request holding the block
	depth int
	gen   int // 1 + the latest request that touched it
	idx   int
}

// bHeap: the farthest next use first, then the deepest block, then the
// larger id (a fixed order for equal keys).
type bHeap []*bNode

func (h bHeap) Len() int { return len(h) }
func (h bHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.next != b.next {
		return a.next > b.next
	}
	if a.depth != b.depth {
		return a.depth > b.depth
	}
	return a.id > b.id
}
func (h bHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *bHeap) Push(x any) {
	n := x.(*bNode)
	n.idx = len(*h)
	*h = append(*h, n)
}
func (h *bHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	n.idx = -1
	return n
}
