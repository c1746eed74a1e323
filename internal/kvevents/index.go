package kvevents

import (
	"sync"

	"github.com/kvcache-go/mooncake/internal/kvcache"
)

// Index is the router's view of which instance holds which blocks, fed by
// events. Blocks are named by our identity (kvcache.HashBlock chained from
// kvcache.RootHash(Salt)), recomputed from each BlockStored's token ids,
// as uint64 keys (BlockHash.Uint64). Safe for concurrent use.
type Index struct {
	// Salt is the namespace of the recomputed identity ("": the default,
	// the prefix cache of requests without cache_salt).
	Salt string

	mu   sync.Mutex
	inst map[string]*instIndex
}

type instIndex struct {
	ours map[string]kvcache.BlockHash // published hash key -> our identity
	have map[uint64]int               // our identity -> published blocks naming it
}

// NewIndex returns an empty index.
func NewIndex() *Index { return &Index{inst: map[string]*instIndex{}} }

func (x *Index) get(instance string) *instIndex {
	in := x.inst[instance]
	if in == nil {
		in = &instIndex{ours: map[string]kvcache.BlockHash{}, have: map[uint64]int{}}
		x.inst[instance] = in
	}
	return in
}

// Apply feeds one batch of instance's events.
func (x *Index) Apply(instance string, b Batch) {
	x.mu.Lock()
	defer x.mu.Unlock()
	in := x.get(instance)
	for _, e := range b.Events {
		switch e := e.(type) {
		case BlockStored:
			in.stored(e, x.Salt)
		case BlockRemoved:
			for _, h := range e.BlockHashes {
				in.removed(h.Key())
			}
		case AllBlocksCleared:
			x.inst[instance] = nil
			delete(x.inst, instance)
			in = x.get(instance)
		}
	}
}

func (in *instIndex) stored(e BlockStored, salt string) {
	parent := kvcache.RootHash(salt)
	if e.ParentBlockHash != nil {
		p, ok := in.ours[e.ParentBlockHash.Key()]
		if !ok {
			return // a parent we never saw (evicted, or events lost): cannot name these blocks
		}
		parent = p
	}
	if len(e.TokenIDs) != len(e.BlockHashes)*e.BlockSize {
		return
	}
	for i, h := range e.BlockHashes {
		ours := kvcache.HashBlock(parent, e.TokenIDs[i*e.BlockSize:(i+1)*e.BlockSize])
		k := h.Key()
		if old, dup := in.ours[k]; dup {
			in.drop(old)
		}
		in.ours[k] = ours
		in.have[ours.Uint64()]++
		parent = ours
	}
}

func (in *instIndex) removed(k string) {
	if ours, ok := in.ours[k]; ok {
		delete(in.ours, k)
		in.drop(ours)
	}
}

func (in *instIndex) drop(ours kvcache.BlockHash) {
	if in.have[ours.Uint64()]--; in.have[ours.Uint64()] <= 0 {
		delete(in.have, ours.Uint64())
	}
}

// Clear forgets everything known about instance.
func (x *Index) Clear(instance string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.inst, instance)
}

// Matched is how many leading blocks of a prompt instance holds; blocks are
// the prompt's kvcache.HashBlocks(Salt, ...) as Uint64 keys.
func (x *Index) Matched(instance string, blocks []uint64) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	in := x.inst[instance]
	if in == nil {
		return 0
	}
	n := 0
	for _, b := range blocks {
		if in.have[b] == 0 {
			break
		}
		n++
	}
	return n
}

// Blocks is how many distinct blocks instance holds.
func (x *Index) Blocks(instance string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if in := x.inst[instance]; in != nil {
		return len(in.have)
	}
	return 0
}

// PromptBlocks returns the uint64 keys of a token prompt's full blocks in
// our identity, what Matched takes.
func PromptBlocks(salt string, blockSize int, tokens []int) []uint64 {
	hs := kvcache.HashBlocks(salt, blockSize, tokens)
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = h.Uint64()
	}
	return out
}
