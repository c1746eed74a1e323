package kvcache

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/kvcache-go/mooncake/internal/evict"
)

// ErrNoBlocks is returned by Allocate when fewer free blocks remain than asked for.
var ErrNoBlocks = errors.New("kvcache: out of free blocks")

type blockMeta struct {
	ref    int
	hash   BlockHash
	hashed bool
	inFree bool // free (in the eviction order if hashed, in the plain set otherwise)
}

// Pool hands out block ids of a paged KV cache. It is a pure data structure,
// not safe for concurrent use: the engine's scheduler owns it.
//
// Every block is either in use (reference count > 0) or free. A free block
// is either plain (it holds nothing reusable) or cached (it still holds a
// hashed prefix block). Plain free blocks form a set ordered by id; cached
// free blocks sit in an eviction order (package internal/evict): by
// default LRU, the order in which they became free.
//
// Allocate takes the lowest plain ids first, then evicts cached blocks in
// eviction order (LRU: least recently freed first), and returns the ids
// sorted ascending. So a request's block table is made of runs of
// consecutive ids (a fresh pool gives one run), which lets a KV transfer
// move a run with one request; and a cached prefix is evicted only when no
// plain block is left. A later request with the same prefix can take a
// cached free block back out of the eviction order with Touch: the reuse of
// cached blocks. A block's hash is dropped when Allocate hands it out for
// new contents.
type Pool struct {
	blocks  []blockMeta
	order   evict.Policy[int] // cached free blocks, next victim first
	group   uint64            // Free calls so far: the eviction group of a release
	numFree int
	cached  map[BlockHash]int

	plain    []uint64 // bit id set: plain free block
	plainLow int      // no bit is set in plain[:plainLow]
	numPlain int

	onRemoved func(BlockHash) // SetRemovedHook
}

// SetRemovedHook makes the pool call f with the hash of every block that
// leaves the prefix cache (evicted for new contents, or DropHash): the
// engine's KV events. f must not call back into the pool.
func (p *Pool) SetRemovedHook(f func(BlockHash)) { p.onRemoved = f }

// NewPool returns a pool of n free blocks numbered 0..n-1 that evicts
// cached blocks in LRU order.
func NewPool(n int) *Pool {
	p, _ := NewPoolWith(n, evict.KindLRU)
	return p
}

// NewPoolWith is NewPool with the eviction order of cached free blocks:
// evict.KindLRU ("" too), evict.KindTailFirst or evict.KindRetention (each
// Free is one group, a block's depth its index in the freed table, its
// hash its identity). It fails only for an unknown kind (evict.ErrUnknown).
func NewPoolWith(n int, eviction evict.Kind) (*Pool, error) {
	order, err := evict.New[int](eviction)
	if err != nil {
		return nil, fmt.Errorf("kvcache: %w", err)
	}
	if s, ok := order.(interface{ SetCapacity(int) }); ok {
		s.SetCapacity(n) // Retention's unit of time: pool sizes of releases
	}
	p := &Pool{blocks: make([]blockMeta, n), order: order, cached: make(map[BlockHash]int),
		plain: make([]uint64, (n+63)/64)}
	for i := range p.blocks {
		p.addFree(i, 0)
	}
	return p, nil
}

// addFree makes block id free: into the eviction order (as the most recent,
// depth = its index in the freed block table) if it holds a hash, into the
// plain set otherwise.
func (p *Pool) addFree(id, depth int) {
	b := &p.blocks[id]
	b.inFree = true
	p.numFree++
	if !b.hashed {
		p.plain[id/64] |= 1 << (id % 64)
		p.plainLow = min(p.plainLow, id/64)
		p.numPlain++
		return
	}
	p.order.Add(id, evict.Meta{Group: p.group, Depth: depth, Hash: b.hash.Uint64()})
}

// removeFree takes free block id out of its set or the eviction order.
func (p *Pool) removeFree(id int) {
	b := &p.blocks[id]
	b.inFree = false
	p.numFree--
	if !b.hashed {
		p.plain[id/64] &^= 1 << (id % 64)
		p.numPlain--
		return
	}
	p.order.Remove(id)
}

// lowestPlain returns the lowest plain free id (the set must not be empty).
func (p *Pool) lowestPlain() int {
	for p.plain[p.plainLow] == 0 {
		p.plainLow++
	}
	return p.plainLow*64 + bits.TrailingZeros64(p.plain[p.plainLow])
}

// unhash drops block id's hash, moving it to the plain set if it is free.
func (p *Pool) unhash(id int) {
	b := &p.blocks[id]
	if !b.hashed {
		return
	}
	free := b.inFree
	if free {
		p.removeFree(id)
	}
	if p.cached[b.hash] == id {
		delete(p.cached, b.hash)
		if p.onRemoved != nil {
			p.onRemoved(b.hash)
		}
	}
	b.hashed = false
	if free {
		p.addFree(id, 0)
	}
}

// NumBlocks is the pool size.
func (p *Pool) NumBlocks() int { return len(p.blocks) }

// NumFree counts blocks with no reference (including cached ones that may be reused).
func (p *Pool) NumFree() int { return p.numFree }

// NumUsed counts blocks with at least one reference.
func (p *Pool) NumUsed() int { return len(p.blocks) - p.numFree }

// NumCached counts blocks that currently hold a hashed, reusable prefix.
func (p *Pool) NumCached() int { return len(p.cached) }

// RefCount returns the reference count of block id.
func (p *Pool) RefCount(id int) int { return p.blocks[id].ref }

// Lookup returns the ids of the longest prefix of hashes that is cached, in
// order. It has no side effects.
func (p *Pool) Lookup(hashes []BlockHash) []int {
	var ids []int
	for _, h := range hashes {
		id, ok := p.cached[h]
		if !ok {
			break
		}
		ids = append(ids, id)
	}
	return ids
}

// Touch adds one reference to each block, taking free ones out of the eviction order.
func (p *Pool) Touch(ids []int) {
	for _, id := range ids {
		b := &p.blocks[id]
		if b.ref == 0 && b.inFree {
			p.removeFree(id)
		}
		b.ref++
	}
}

// Allocate takes n free blocks for a new block table: AllocateFor(n, -1, n).
func (p *Pool) Allocate(n int) ([]int, error) { return p.AllocateFor(n, -1, n) }

// AllocateFor takes n free blocks, each with reference count 1, for a block
// table whose last block is after (-1 for none) and that will need about
// room blocks more (room >= n; the rest of a prompt still to be prefilled).
// It prefers, in order: the plain ids right after after (the table grows
// in place); the lowest run of at least room consecutive plain ids, else of
// at least n; the lowest plain ids; and only then cached blocks in eviction
// order (their hashes dropped). The ids are returned sorted
// ascending.
func (p *Pool) AllocateFor(n, after, room int) ([]int, error) {
	if n > p.numFree {
		return nil, fmt.Errorf("%w: need %d, have %d", ErrNoBlocks, n, p.numFree)
	}
	ids := make([]int, 0, n)
	take := func(id int) {
		p.removeFree(id)
		b := &p.blocks[id]
		if b.hashed {
			if p.cached[b.hash] == id {
				delete(p.cached, b.hash)
				if p.onRemoved != nil {
					p.onRemoved(b.hash)
				}
			}
			b.hashed = false
		}
		b.ref = 1
		ids = append(ids, id)
	}
	for id := after + 1; after >= 0 && len(ids) < n && id < len(p.blocks) && p.isPlain(id); id++ {
		take(id)
	}
	if k := n - len(ids); k > 0 && p.numPlain >= k {
		start := p.findRun(max(room-len(ids), k))
		if start < 0 {
			start = p.findRun(k)
		}
		for id := start; start >= 0 && len(ids) < n; id++ {
			take(id)
		}
	}
	for len(ids) < n {
		if p.numPlain > 0 {
			take(p.lowestPlain())
		} else {
			id, _ := p.order.Victim() // numFree > numPlain: a cached block is free
			take(id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

func (p *Pool) isPlain(id int) bool { return p.plain[id/64]&(1<<(id%64)) != 0 }

// findRun returns the start of the lowest run of at least n consecutive
// plain free ids, or -1.
func (p *Pool) findRun(n int) int {
	run, start := 0, 0
	for w := p.plainLow; w < len(p.plain); w++ {
		x := p.plain[w]
		switch x {
		case 0:
			run = 0
			continue
		case ^uint64(0):
			if run == 0 {
				start = w * 64
			}
			run += 64
			if run >= n {
				return start
			}
			continue
		}
		for b := range 64 {
			if x&(1<<b) == 0 {
				run = 0
				continue
			}
			if run == 0 {
				start = w*64 + b
			}
			if run++; run >= n {
				return start
			}
		}
	}
	return -1
}

// Free drops one reference from each block. Blocks are released in reverse
// order so that the tail of a sequence is reused before its head (a shared
// prefix lives longest).
func (p *Pool) Free(ids []int) {
	p.group++
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		b := &p.blocks[id]
		if b.ref <= 0 {
			panic(fmt.Sprintf("kvcache: double free of block %d", id))
		}
		b.ref--
		if b.ref == 0 {
			p.addFree(id, i)
		}
	}
}

// SetHash records that block id holds the full block with hash h, making it
// reusable by Lookup. If another block already holds h the call is a no-op.
func (p *Pool) SetHash(id int, h BlockHash) {
	b := &p.blocks[id]
	if b.hashed {
		return
	}
	if _, dup := p.cached[h]; dup {
		return
	}
	free := b.inFree
	if free {
		p.removeFree(id)
	}
	b.hash, b.hashed = h, true
	p.cached[h] = id
	if free {
		p.addFree(id, 0)
	}
}

// DropHash forgets the cached contents of block id (for example after a
// failed external load wrote garbage into it).
func (p *Pool) DropHash(id int) { p.unhash(id) }

// Hash returns the hash held by block id, if any.
func (p *Pool) Hash(id int) (BlockHash, bool) {
	b := &p.blocks[id]
	return b.hash, b.hashed
}
