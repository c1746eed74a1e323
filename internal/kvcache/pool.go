package kvcache

import (
	"errors"
	"fmt"
)

// ErrNoBlocks is returned by Allocate when fewer free blocks remain than asked for.
var ErrNoBlocks = errors.New("kvcache: out of free blocks")

type blockMeta struct {
	ref        int
	hash       BlockHash
	hashed     bool
	prev, next int // free-list links; -1 = none
	inFree     bool
}

// Pool hands out block ids of a paged KV cache. It is a pure data structure,
// not safe for concurrent use: the engine's scheduler owns it.
//
// Every block is either in use (reference count > 0) or free. Free blocks sit
// in one queue ordered by the time they became free; Allocate takes from the
// front (least recently freed first). A free block may still hold a cached
// prefix (it has a hash): a later request with the same prefix can take it
// back out of the queue with Touch, which is the LRU reuse of cached blocks.
// A block's hash is dropped when Allocate hands it out for new contents.
type Pool struct {
	blocks     []blockMeta
	head, tail int
	numFree    int
	cached     map[BlockHash]int
}

// NewPool returns a pool of n free blocks numbered 0..n-1.
func NewPool(n int) *Pool {
	p := &Pool{blocks: make([]blockMeta, n), head: -1, tail: -1, cached: make(map[BlockHash]int)}
	for i := range p.blocks {
		p.blocks[i].prev, p.blocks[i].next = -1, -1
		p.pushBack(i)
	}
	return p
}

func (p *Pool) pushBack(id int) {
	b := &p.blocks[id]
	b.inFree, b.prev, b.next = true, p.tail, -1
	if p.tail >= 0 {
		p.blocks[p.tail].next = id
	} else {
		p.head = id
	}
	p.tail = id
	p.numFree++
}

func (p *Pool) remove(id int) {
	b := &p.blocks[id]
	if b.prev >= 0 {
		p.blocks[b.prev].next = b.next
	} else {
		p.head = b.next
	}
	if b.next >= 0 {
		p.blocks[b.next].prev = b.prev
	} else {
		p.tail = b.prev
	}
	b.inFree, b.prev, b.next = false, -1, -1
	p.numFree--
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

// Touch adds one reference to each block, taking free ones out of the free queue.
func (p *Pool) Touch(ids []int) {
	for _, id := range ids {
		b := &p.blocks[id]
		if b.ref == 0 && b.inFree {
			p.remove(id)
		}
		b.ref++
	}
}

// Allocate takes n blocks from the front of the free queue, dropping any
// cached hash they held, each with reference count 1.
func (p *Pool) Allocate(n int) ([]int, error) {
	if n > p.numFree {
		return nil, fmt.Errorf("%w: need %d, have %d", ErrNoBlocks, n, p.numFree)
	}
	ids := make([]int, 0, n)
	for range n {
		id := p.head
		p.remove(id)
		b := &p.blocks[id]
		if b.hashed {
			if p.cached[b.hash] == id {
				delete(p.cached, b.hash)
			}
			b.hashed = false
		}
		b.ref = 1
		ids = append(ids, id)
	}
	return ids, nil
}

// Free drops one reference from each block. Blocks are released in reverse
// order so that the tail of a sequence is reused before its head (a shared
// prefix lives longest).
func (p *Pool) Free(ids []int) {
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		b := &p.blocks[id]
		if b.ref <= 0 {
			panic(fmt.Sprintf("kvcache: double free of block %d", id))
		}
		b.ref--
		if b.ref == 0 {
			p.pushBack(id)
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
	b.hash, b.hashed = h, true
	p.cached[h] = id
}

// DropHash forgets the cached contents of block id (for example after a
// failed external load wrote garbage into it).
func (p *Pool) DropHash(id int) {
	b := &p.blocks[id]
	if b.hashed {
		if p.cached[b.hash] == id {
			delete(p.cached, b.hash)
		}
		b.hashed = false
	}
}

// Hash returns the hash held by block id, if any.
func (p *Pool) Hash(id int) (BlockHash, bool) {
	b := &p.blocks[id]
	return b.hash, b.hashed
}
