package conductor

import (
	"encoding/binary"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// DefaultSeed is the XXH3 seed of the hashing standard when none is
// configured: 1337, the seed Dynamo's indexer and token crates use, so
// hashes computed by either side agree.
const DefaultSeed = 1337

// Hasher computes the standard block hashes: XXH3-64 with Seed over a
// block's tokens as little-endian u32 (the local block hash), rolled as
// seq[0] = local[0], seq[i] = XXH3(le64(seq[i-1]) || le64(local[i]), Seed).
// The zero Hasher uses seed 0; use NewHasher(DefaultSeed) for the standard.
type Hasher struct{ Seed uint64 }

// NewHasher returns a Hasher with seed.
func NewHasher(seed uint64) Hasher { return Hasher{Seed: seed} }

// littleEndian reports whether u32 slices can be read as the
// little-endian byte string directly.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Local is the local hash of one block of tokens.
func (h Hasher) Local(tokens []uint32) uint64 {
	if littleEndian {
		if len(tokens) == 0 {
			return xxh3.HashSeed(nil, h.Seed)
		}
		b := unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*len(tokens))
		return xxh3.HashSeed(b, h.Seed)
	}
	b := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	return xxh3.HashSeed(b, h.Seed)
}

// Roll is the sequence hash of a block whose parent's sequence hash is prev
// and whose local hash is local.
func (h Hasher) Roll(prev, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], prev)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], h.Seed)
}

// Next is the sequence hash of a block of tokens after a parent: the
// block's local hash when it is the first (hasParent false), else Roll.
func (h Hasher) Next(parent uint64, hasParent bool, tokens []uint32) uint64 {
	l := h.Local(tokens)
	if !hasParent {
		return l
	}
	return h.Roll(parent, l)
}

// Fold is the local hash of a block whose content keys (kvevents.
// ContentKeys: multimodal inputs, prompt embeddings) are content:
// XXH3(le64(local) || content, Seed). Blocks without content keys keep
// their token hash.
func (h Hasher) Fold(local uint64, content []byte) uint64 {
	if len(content) == 0 {
		return local
	}
	b := make([]byte, 8, 8+len(content))
	binary.LittleEndian.PutUint64(b, local)
	return xxh3.HashSeed(append(b, content...), h.Seed)
}

// SeqHashes returns the sequence hashes of the complete blocks of tokens
// (a trailing partial block is not hashed).
func (h Hasher) SeqHashes(tokens []uint32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	n := len(tokens) / blockSize
	out := make([]uint64, n)
	var prev uint64
	for i := 0; i < n; i++ {
		prev = h.Next(prev, i > 0, tokens[i*blockSize:(i+1)*blockSize])
		out[i] = prev
	}
	return out
}

// Tokens32 converts token ids to the u32 the hash reads; ids outside
// [0, 2^32) are truncated as the engines' little-endian u32 encoding would.
func Tokens32(ids []int) []uint32 {
	out := make([]uint32, len(ids))
	for i, t := range ids {
		out[i] = uint32(t)
	}
	return out
}

// digest names a published hash the index does not compute itself (an
// engine's own hash: an integer as is, bytes through XXH3 with seed 0) as
// a u64 key.
func digest(b []byte) uint64 { return xxh3.Hash(b) }
