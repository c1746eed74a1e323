package kvcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"unsafe"
)

// ElemBytes is the size of one cached K or V element: float32, little endian.
const ElemBytes = 4

// Layout describes how the paged KV cache of one engine is laid out in
// memory. The cache is one contiguous region per layer. A region holds
// NumBlocks blocks back to back; block b of a layer starts at byte
// b*BlockBytes(). Inside a block the K half comes first and the V half second:
//
//	block b, layer l:  region[l][b*BlockBytes() : (b+1)*BlockBytes()]
//	  K: bytes [KOffset(), KOffset()+HalfBytes())  as float32[BlockSize][NumKVHeads][HeadDim]
//	  V: bytes [VOffset(), VOffset()+HalfBytes())  as float32[BlockSize][NumKVHeads][HeadDim]
//
// Token slot s (0 <= s < BlockSize) of a block holds the K (or V) vector of
// every KV head for the token at position blockIndex*BlockSize+s of its
// sequence. K is stored after RoPE has been applied. All values are IEEE-754
// float32 in little-endian byte order (the native order on every platform we
// build for).
type Layout struct {
	NumLayers  int
	NumBlocks  int
	BlockSize  int // tokens per block
	NumKVHeads int
	HeadDim    int
}

// Validate reports whether every dimension is positive.
func (l Layout) Validate() error {
	if l.NumLayers <= 0 || l.NumBlocks <= 0 || l.BlockSize <= 0 || l.NumKVHeads <= 0 || l.HeadDim <= 0 {
		return fmt.Errorf("kvcache: invalid layout %+v: every dimension must be positive", l)
	}
	return nil
}

// TokenFloats is the number of float32 values of one token's K (or V) in one layer.
func (l Layout) TokenFloats() int { return l.NumKVHeads * l.HeadDim }

// HalfBytes is the size in bytes of the K half (equally the V half) of one block.
func (l Layout) HalfBytes() int { return l.BlockSize * l.TokenFloats() * ElemBytes }

// BlockBytes is the stride between consecutive blocks of a layer region:
// K half plus V half.
func (l Layout) BlockBytes() int { return 2 * l.HalfBytes() }

// KOffset is the byte offset of the K half inside a block.
func (l Layout) KOffset() int { return 0 }

// VOffset is the byte offset of the V half inside a block.
func (l Layout) VOffset() int { return l.HalfBytes() }

// LayerBytes is the size of one layer region.
func (l Layout) LayerBytes() int { return l.NumBlocks * l.BlockBytes() }

// BytesPerToken is the KV size of one token summed over all layers (K and V).
func (l Layout) BytesPerToken() int { return 2 * l.TokenFloats() * ElemBytes * l.NumLayers }

// Compat identifies what a KV block means. Two engines may exchange KV blocks
// only if their Compat values are equal (compare Hash()).
type Compat struct {
	Model      string `json:"model"`
	DType      string `json:"dtype"` // always "float32" for this engine
	NumLayers  int    `json:"num_layers"`
	NumKVHeads int    `json:"num_kv_heads"`
	HeadDim    int    `json:"head_dim"`
	BlockSize  int    `json:"block_size"`
	// Weights fingerprints the model's weights (model.Fingerprint): two
	// engines serving different weights under one name are incompatible.
	Weights string `json:"weights,omitempty"`
}

// Hash is a hex SHA-256 over a canonical text form of c.
func (c Compat) Hash() string {
	s := fmt.Sprintf("mooncake-kv-compat-v1|model=%s|dtype=%s|layers=%d|kv_heads=%d|head_dim=%d|block_size=%d|weights=%s",
		c.Model, c.DType, c.NumLayers, c.NumKVHeads, c.HeadDim, c.BlockSize, c.Weights)
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// Allocator returns a zeroed byte region of exactly size bytes whose first
// byte is at least 4-byte aligned. The P/D connector hands in one that
// returns transfer-engine registered (memfd) memory.
type Allocator func(size int) ([]byte, error)

// HeapAllocator allocates regions on the Go heap.
func HeapAllocator(size int) ([]byte, error) {
	// Allocate float32s so that the region is 4-byte aligned.
	f := make([]float32, (size+ElemBytes-1)/ElemBytes)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), len(f)*ElemBytes)[:size], nil
}

// ErrLayout reports a region that does not fit the layout.
var ErrLayout = errors.New("kvcache: bad region")

// Regions is the KV memory of one engine: one region per layer.
type Regions struct {
	Layout Layout
	Layers [][]byte
	floats [][]float32
}

// NewRegions allocates one region per layer with alloc.
func NewRegions(l Layout, alloc Allocator) (*Regions, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if alloc == nil {
		alloc = HeapAllocator
	}
	r := &Regions{Layout: l}
	for i := 0; i < l.NumLayers; i++ {
		b, err := alloc(l.LayerBytes())
		if err != nil {
			return nil, fmt.Errorf("kvcache: allocate layer %d (%d bytes): %w", i, l.LayerBytes(), err)
		}
		if len(b) != l.LayerBytes() {
			return nil, fmt.Errorf("%w: layer %d region has %d bytes, want %d", ErrLayout, i, len(b), l.LayerBytes())
		}
		if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%ElemBytes != 0 {
			return nil, fmt.Errorf("%w: layer %d region is not 4-byte aligned", ErrLayout, i)
		}
		r.Layers = append(r.Layers, b)
		r.floats = append(r.floats, unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/ElemBytes))
	}
	return r, nil
}

// Block returns the K and V halves of block id in layer as float32 slices
// aliasing the region: [BlockSize*NumKVHeads*HeadDim] each.
func (r *Regions) Block(layer, id int) (k, v []float32) {
	n := r.Layout.BlockSize * r.Layout.TokenFloats()
	base := id * 2 * n
	f := r.floats[layer]
	return f[base : base+n : base+n], f[base+n : base+2*n : base+2*n]
}

// BlockBytes returns the raw bytes of block id in layer (K half then V half).
func (r *Regions) BlockBytes(layer, id int) []byte {
	bb := r.Layout.BlockBytes()
	return r.Layers[layer][id*bb : (id+1)*bb : (id+1)*bb]
}

// BlockHash is the identity of a full block of tokens; see docs/kv-block-identity.md.
type BlockHash [32]byte

// String is the lowercase hex form.
func (h BlockHash) String() string { return hex.EncodeToString(h[:]) }

// Uint64 is the first 8 bytes read as little-endian, a compact key for indexes.
func (h BlockHash) Uint64() uint64 { return binary.LittleEndian.Uint64(h[:8]) }

// hashDomain separates block hashes from any other SHA-256 use.
const hashDomain = "mooncake-kv-block-v1"

// RootHash is the parent of a sequence's first block. salt separates tenants
// (an empty salt is the shared, default namespace).
func RootHash(salt string) BlockHash {
	h := sha256.New()
	h.Write([]byte(hashDomain))
	h.Write([]byte{0})
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(salt)))
	h.Write(n[:])
	h.Write([]byte(salt))
	var out BlockHash
	h.Sum(out[:0])
	return out
}

// HashBlock chains one block of token ids onto parent.
func HashBlock(parent BlockHash, tokens []int) BlockHash {
	buf := make([]byte, 0, 32+4+4*len(tokens))
	buf = append(buf, parent[:]...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(tokens)))
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
	}
	return sha256.Sum256(buf)
}

// HashBlocks returns the hashes of every full block of tokens.
func HashBlocks(salt string, blockSize int, tokens []int) []BlockHash {
	return AppendBlockHashes(nil, salt, blockSize, tokens)
}

// AppendBlockHashes extends have (the hashes of the first len(have) full
// blocks of tokens) with the hashes of the remaining full blocks.
func AppendBlockHashes(have []BlockHash, salt string, blockSize int, tokens []int) []BlockHash {
	parent := RootHash(salt)
	if len(have) > 0 {
		parent = have[len(have)-1]
	}
	for i := len(have); (i+1)*blockSize <= len(tokens); i++ {
		parent = HashBlock(parent, tokens[i*blockSize:(i+1)*blockSize])
		have = append(have, parent)
	}
	return have
}
