package tracesim

import (
	"container/heap"
	"fmt"
	"strings"

	"github.com/kvcache-go/mooncake/internal/evict"
)

// Policy chooses which cached block leaves first when the pool is full.
type Policy int

const (
	// LRU evicts the least recently used block.
	LRU Policy = iota
	// LFU evicts the block used by the fewest requests since it was
	// cached; ties go to the least recently used.
	LFU
	// LengthAware evicts the block deepest in its prompt (highest block
	// position) first; ties go to the least recently used.
	LengthAware
	// TailFirst evicts the tails of block chains before their heads:
	// first the last block of a prompt (partial in almost every request,
	// so only the very same prompt can reuse it), then the block whose
	// latest request is oldest, and among blocks of one request the
	// deepest first (internal/evict's TailFirst order).
	TailFirst
	// Retention is internal/evict's Retention: a request whose prompt
	// extends an earlier one's (the next turn of a conversation) takes
	// that one's turn plus one; a block's level is the larger of its
	// request's turn and the times it came back while cached (capped at
	// 3); it may stay (level+1) pool sizes of block insertions, partial
	// tails none; the block due first leaves first.
	Retention
)

// Belady is the offline optimum (SimulateBelady): evict the block whose
// next use is farthest. It needs the future, so it is a yardstick, not a
// policy a pool can run, and it is not in Policies.
const Belady Policy = 100

// Policies lists every policy in report order.
var Policies = []Policy{LRU, LFU, LengthAware, TailFirst, Retention}

func (p Policy) String() string {
	switch p {
	case LRU:
		return "LRU"
	case LFU:
		return "LFU"
	case LengthAware:
		return "LengthAware"
	case TailFirst:
		return "TailFirst"
	case Retention:
		return "Retention"
	case Belady:
		return "Belady"
	case ClassCeiling:
		return "ClassCeiling"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ParsePolicy reads a policy name as String prints it, case-insensitive,
// or its flag spelling: lru, lfu, length-aware, tail-first, retention.
func ParsePolicy(name string) (Policy, error) {
	n := strings.ToLower(strings.ReplaceAll(name, "-", ""))
	for _, p := range Policies {
		if strings.ToLower(p.String()) == n {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown cache policy %q (want lru, lfu, length-aware, tail-first or retention)", name)
}

// Unlimited as a capacity means the pool never evicts.
const Unlimited = 0

type entry struct {
	id      int64
	last    uint64 // tick of the latest touch
	freq    uint64 // requests that touched the block since it was cached
	depth   int    // position of the block in the latest request that touched it
	partial bool   // the last block of the latest request that touched it
	idx     int    // index in the heap; -1 while pinned by the current request
	gen     uint64 // the latest request (Access call) that touched the block
}

// Cache is one pool of KV blocks keyed by hash id, with a capacity in
// blocks and an eviction policy. It is not safe for concurrent use.
type Cache struct {
	policy      Policy
	capacity    int
	blocks      map[int64]*entry
	h           evictHeap
	tick        uint64
	gen         uint64
	evictions   int
	pinned      []*entry
	core        evict.Policy[int64] // the eviction order of a core-backed policy (Retention)
	touched     []*entry            // this request's blocks in prompt order (core-backed)
	partialTail bool                // the current access's last block is a partial tail

	// Events, if set, hears blocks enter and leave the cache (the
	// events-fed router's source).
	Events CacheEvents
}

// CacheEvents hears a cache's changes, as an engine's KV events do.
type CacheEvents interface {
	Stored(id int64)
	Removed(id int64)
}

// NewCache returns an empty cache of capacity blocks (Unlimited: no
// eviction). A negative capacity is treated as Unlimited.
func NewCache(p Policy, capacity int) *Cache {
	if capacity < 0 {
		capacity = Unlimited
	}
	c := &Cache{policy: p, capacity: capacity, blocks: make(map[int64]*entry), h: evictHeap{policy: p}}
	if p == Retention {
		r := evict.NewRetention[int64]()
		r.SetCapacity(capacity)
		c.core = r
	}
	return c
}

// Len is the number of cached blocks.
func (c *Cache) Len() int { return len(c.blocks) }

// Evictions is the number of blocks evicted so far.
func (c *Cache) Evictions() int { return c.evictions }

// Contains reports whether block id is cached.
func (c *Cache) Contains(id int64) bool { _, ok := c.blocks[id]; return ok }

// Prefix returns the length of the longest run of leading ids that are
// cached. It changes nothing.
func (c *Cache) Prefix(ids []int64) int {
	for i, id := range ids {
		if _, ok := c.blocks[id]; !ok {
			return i
		}
	}
	return len(ids)
}

// Access serves one request: it returns Prefix(ids) (the hits), then
// touches or inserts every block of ids in order. Blocks of this request
// are never evicted to make room for its other blocks: once every cached
// block belongs to the request, its remaining blocks are not cached. The
// last block is the prompt's partial tail (TailFirst, Retention).
func (c *Cache) Access(ids []int64) (hits int) {
	c.partialTail = true
	return c.access(ids)
}

// AccessPrefix is Access for a prefix of a prompt read by another
// instance (a pulled prefix): its last block is a full block, not a
// partial tail.
func (c *Cache) AccessPrefix(ids []int64) (hits int) {
	c.partialTail = false
	return c.access(ids)
}

func (c *Cache) access(ids []int64) (hits int) {
	hits = c.Prefix(ids)
	c.gen++
	// Pin: take this request's cached blocks out of the eviction order.
	c.pinned = c.pinned[:0]
	if c.core != nil {
		return c.accessCore(ids, hits)
	}
	for _, id := range ids {
		if e, ok := c.blocks[id]; ok && e.idx >= 0 {
			heap.Remove(&c.h, e.idx)
			e.idx = -1
			c.pinned = append(c.pinned, e)
		}
	}
	for pos, id := range ids {
		c.tick++
		e, ok := c.blocks[id]
		if !ok {
			if c.capacity != Unlimited && len(c.blocks) >= c.capacity {
				if c.h.Len() == 0 {
					continue // the pool holds only this request's blocks
				}
				v := heap.Pop(&c.h).(*entry)
				delete(c.blocks, v.id)
				c.evictions++
				if c.Events != nil {
					c.Events.Removed(v.id)
				}
			}
			e = &entry{id: id, idx: -1}
			c.blocks[id] = e
			if c.Events != nil {
				c.Events.Stored(id)
			}
			c.pinned = append(c.pinned, e)
		} else if e.gen == c.gen {
			continue // a repeated id within one request is touched once
		}
		e.gen = c.gen
		e.last = c.tick
		e.freq++
		e.depth = pos
		e.partial = c.partialTail && pos == len(ids)-1
	}
	for _, e := range c.pinned {
		heap.Push(&c.h, e)
	}
	return hits
}

// accessCore is Access for a policy kept by internal/evict: the same rules,
// with the request as one group, each block's position its depth and its
// id (plus one: 0 means none) its identity.
func (c *Cache) accessCore(ids []int64, hits int) int {
	for _, id := range ids {
		if e, ok := c.blocks[id]; ok && e.idx >= 0 {
			c.core.Remove(id)
			e.idx = -1
		}
	}
	c.touched = c.touched[:0]
	for pos, id := range ids {
		c.tick++
		e, ok := c.blocks[id]
		if !ok {
			if c.capacity != Unlimited && len(c.blocks) >= c.capacity {
				v, ok := c.core.Victim()
				if !ok {
					continue // the pool holds only this request's blocks
				}
				delete(c.blocks, v)
				c.evictions++
				if c.Events != nil {
					c.Events.Removed(v)
				}
			}
			e = &entry{id: id, idx: -1}
			c.blocks[id] = e
			if c.Events != nil {
				c.Events.Stored(id)
			}
		} else if e.gen == c.gen {
			continue
		}
		e.gen = c.gen
		e.last = c.tick
		e.freq++
		e.depth = pos
		e.partial = c.partialTail && pos == len(ids)-1
		c.touched = append(c.touched, e)
	}
	for _, e := range c.touched {
		c.core.Add(e.id, evict.Meta{Group: c.gen, Depth: e.depth, Partial: e.partial, Hash: uint64(e.id) + 1})
		e.idx = 0 // evictable
	}
	return hits
}

// evictHeap orders unpinned entries, the next victim first.
type evictHeap struct {
	policy Policy
	es     []*entry
}

func (h *evictHeap) Len() int { return len(h.es) }

func (h *evictHeap) Less(i, j int) bool {
	a, b := h.es[i], h.es[j]
	switch h.policy {
	case LFU:
		if a.freq != b.freq {
			return a.freq < b.freq
		}
	case LengthAware:
		if a.depth != b.depth {
			return a.depth > b.depth
		}
	case TailFirst:
		if a.partial != b.partial {
			return a.partial
		}
		if a.gen != b.gen {
			return a.gen < b.gen
		}
		if a.depth != b.depth {
			return a.depth > b.depth
		}
	}
	return a.last < b.last
}

func (h *evictHeap) Swap(i, j int) {
	h.es[i], h.es[j] = h.es[j], h.es[i]
	h.es[i].idx = i
	h.es[j].idx = j
}

func (h *evictHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(h.es)
	h.es = append(h.es, e)
}

func (h *evictHeap) Pop() any {
	n := len(h.es) - 1
	e := h.es[n]
	h.es[n] = nil
	h.es = h.es[:n]
	e.idx = -1
	return e
}

// CacheResult is the outcome of one cache simulation.
type CacheResult struct {
	Policy    Policy
	Capacity  int // blocks; Unlimited (0) means no limit
	Requests  int
	Blocks    int // sum of len(hash_ids)
	Hits      int // sum of per-request leading hits
	Evictions int
}

// HitRate is Hits/Blocks (0 for an empty trace).
func (r CacheResult) HitRate() float64 {
	if r.Blocks == 0 {
		return 0
	}
	return float64(r.Hits) / float64(r.Blocks)
}

// SimulateCache replays reqs in timestamp order through one global pool.
// Belady runs SimulateBelady, ClassCeiling SimulateClassCeiling.
func SimulateCache(reqs []Request, p Policy, capacity int) CacheResult {
	switch p {
	case Belady:
		return SimulateBelady(reqs, capacity)
	case ClassCeiling:
		return SimulateClassCeiling(reqs, capacity)
	}
	c := NewCache(p, capacity)
	res := CacheResult{Policy: p, Capacity: max(capacity, Unlimited)}
	for _, r := range Ordered(reqs) {
		res.Requests++
		res.Blocks += len(r.HashIDs)
		res.Hits += c.Access(r.HashIDs)
	}
	res.Evictions = c.Evictions()
	return res
}

// IdealHits computes, without any cache structure, the hits of an
// unlimited pool: for each request in timestamp order, the longest run of
// leading ids seen in any earlier request.
// It returns the hits and the total number of blocks.
func IdealHits(reqs []Request) (hits, blocks int) {
	seen := make(map[int64]struct{})
	for _, r := range Ordered(reqs) {
		blocks += len(r.HashIDs)
		run := true
		for _, id := range r.HashIDs {
			if _, ok := seen[id]; !ok {
				run = false
			} else if run {
				hits++
			}
		}
		for _, id := range r.HashIDs {
			seen[id] = struct{}{}
		}
	}
	return hits, blocks
}
