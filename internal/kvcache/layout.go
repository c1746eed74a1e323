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
// memory. The KV heads are split across TP tensor-parallel ranks (TP 0 or
// 1: one rank): rank r holds the RankHeads() consecutive heads
// [r*RankHeads(), (r+1)*RankHeads()). Every rank has one contiguous region
// per layer holding only its heads; a region holds NumBlocks blocks back to
// back, block b at byte b*BlockBytes(). Inside a block the layout is head
// major (vLLM's "HND"): for each of the rank's heads, its K then its V for
// every token slot:
//
//	rank r, layer l, block b:  region[r][l][b*BlockBytes() : (b+1)*BlockBytes()]
//	  local head i (global head r*RankHeads()+i): bytes [i*HeadBytes(), (i+1)*HeadBytes())
//	    K: float32[BlockSize][HeadDim], then V: float32[BlockSize][HeadDim]
//
// So any range of heads of one block is one contiguous byte run (what a KV
// transfer between engines of different TP moves with one request), and a
// run of consecutive blocks of a rank is one contiguous byte run too (what a
// transfer between engines of the same TP moves with one request). The
// TP-independent form of a block (FullBlockBytes(), what the store keeps) is
// the same head-major layout over all heads: the ranks' blocks concatenated
// in rank order. Token slot s (0 <= s < BlockSize) holds the vector of the
// token at position blockIndex*BlockSize+s of its sequence. K is stored
// after RoPE has been applied. All values are IEEE-754 float32 in
// little-endian byte order (the native order on every platform we build
// for).
type Layout struct {
	NumLayers  int
	NumBlocks  int
	BlockSize  int // tokens per block
	NumKVHeads int // all ranks together
	HeadDim    int
	// TP is the number of tensor-parallel ranks (0 means 1). It must
	// divide NumKVHeads.
	TP int
}

// BlockLayout names the block layout described on Layout; engines
// exchange it in the P/D handshake.
const BlockLayout = "head-major-v1"

// ErrTP reports a TP size that does not divide the KV heads.
var ErrTP = errors.New("kvcache: tensor-parallel size does not divide the KV heads")

// Validate reports whether every dimension is positive and TP divides the
// KV heads.
func (l Layout) Validate() error {
	if l.NumLayers <= 0 || l.NumBlocks <= 0 || l.BlockSize <= 0 || l.NumKVHeads <= 0 || l.HeadDim <= 0 || l.TP < 0 {
		return fmt.Errorf("kvcache: invalid layout %+v: every dimension must be positive", l)
	}
	if l.NumKVHeads%l.TPSize() != 0 {
		return fmt.Errorf("%w: %d KV heads across %d ranks (the TP size must divide the KV head count)", ErrTP, l.NumKVHeads, l.TPSize())
	}
	return nil
}

// TPSize is the number of ranks (at least 1).
func (l Layout) TPSize() int { return max(1, l.TP) }

// RankHeads is the number of KV heads each rank holds.
func (l Layout) RankHeads() int { return l.NumKVHeads / l.TPSize() }

// HeadBytes is the size of one head's K and V in one block.
func (l Layout) HeadBytes() int { return 2 * l.BlockSize * l.HeadDim * ElemBytes }

// BlockBytes is the stride between consecutive blocks of a rank's layer
// region: the K and V of the rank's heads.
func (l Layout) BlockBytes() int { return l.RankHeads() * l.HeadBytes() }

// FullBlockBytes is the size of one block of one layer over every head:
// the TP-independent form (the ranks' blocks concatenated).
func (l Layout) FullBlockBytes() int { return l.NumKVHeads * l.HeadBytes() }

// LayerBytes is the size of one rank's layer region.
func (l Layout) LayerBytes() int { return l.NumBlocks * l.BlockBytes() }

// BytesPerToken is the KV size of one token summed over all layers and
// heads (K and V).
func (l Layout) BytesPerToken() int { return 2 * l.NumKVHeads * l.HeadDim * ElemBytes * l.NumLayers }

// HeadRank is the rank holding KV head h and h's byte offset inside that
// rank's blocks.
func (l Layout) HeadRank(h int) (rank, offset int) {
	rh := l.RankHeads()
	return h / rh, (h % rh) * l.HeadBytes()
}

// Compat identifies what a KV block means. Two engines may exchange KV blocks
// only if their Compat values are equal (compare Hash()). The TP size is
// deliberately not part of it: blocks move between engines of different TP
// (each side splits the same heads), and the store keeps the TP-independent
// form. Version 2 of the hash is the head-major block layout.
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
	s := fmt.Sprintf("mooncake-kv-compat-v2|model=%s|dtype=%s|layers=%d|kv_heads=%d|head_dim=%d|block_size=%d|weights=%s",
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

// Regions is the KV memory of one engine: per TP rank, one region per layer.
type Regions struct {
	Layout Layout
	Ranks  [][][]byte // [rank][layer]
	floats [][][]float32
}

// NewRegions allocates one region per rank and layer with alloc.
func NewRegions(l Layout, alloc Allocator) (*Regions, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if alloc == nil {
		alloc = HeapAllocator
	}
	ranks := make([][][]byte, l.TPSize())
	for r := range ranks {
		for i := 0; i < l.NumLayers; i++ {
			b, err := alloc(l.LayerBytes())
			if err != nil {
				return nil, fmt.Errorf("kvcache: allocate rank %d layer %d (%d bytes): %w", r, i, l.LayerBytes(), err)
			}
			ranks[r] = append(ranks[r], b)
		}
	}
	return Wrap(l, ranks)
}

// Wrap views regions allocated elsewhere ([rank][layer], each
// l.LayerBytes() long and 4-byte aligned) as Regions.
func Wrap(l Layout, ranks [][][]byte) (*Regions, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if len(ranks) != l.TPSize() {
		return nil, fmt.Errorf("%w: %d ranks, layout has %d", ErrLayout, len(ranks), l.TPSize())
	}
	r := &Regions{Layout: l, Ranks: ranks}
	for ri, layers := range ranks {
		if len(layers) != l.NumLayers {
			return nil, fmt.Errorf("%w: rank %d has %d layer regions, layout has %d", ErrLayout, ri, len(layers), l.NumLayers)
		}
		var fs [][]float32
		for i, b := range layers {
			if len(b) != l.LayerBytes() {
				return nil, fmt.Errorf("%w: rank %d layer %d region has %d bytes, want %d", ErrLayout, ri, i, len(b), l.LayerBytes())
			}
			if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%ElemBytes != 0 {
				return nil, fmt.Errorf("%w: rank %d layer %d region is not 4-byte aligned", ErrLayout, ri, i)
			}
			fs = append(fs, unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/ElemBytes))
		}
		r.floats = append(r.floats, fs)
	}
	return r, nil
}

// Head returns the K and V of KV head h (0 <= h < NumKVHeads, any rank) in
// block id of layer, as float32 slices aliasing the region holding it:
// [BlockSize*HeadDim] each.
func (r *Regions) Head(layer, id, h int) (k, v []float32) {
	l := &r.Layout
	rh := l.NumKVHeads / max(1, l.TP)
	n := l.BlockSize * l.HeadDim
	base := (id*rh + h%rh) * 2 * n
	f := r.floats[h/rh][layer]
	return f[base : base+n : base+n], f[base+n : base+2*n : base+2*n]
}

// BlockBytes returns the raw bytes of block id of rank's layer region
// (Layout.BlockBytes() long).
func (r *Regions) BlockBytes(rank, layer, id int) []byte {
	bb := r.Layout.BlockBytes()
	return r.Ranks[rank][layer][id*bb : (id+1)*bb : (id+1)*bb]
}

// ReadBlock appends block id of layer in its TP-independent form (every
// rank's block in rank order, Layout.FullBlockBytes()) to dst.
func (r *Regions) ReadBlock(dst []byte, layer, id int) []byte {
	for rank := range r.Ranks {
		dst = append(dst, r.BlockBytes(rank, layer, id)...)
	}
	return dst
}

// WriteBlock stores src, block id of layer in its TP-independent form
// (Layout.FullBlockBytes()), into the ranks' regions.
func (r *Regions) WriteBlock(layer, id int, src []byte) error {
	if len(src) != r.Layout.FullBlockBytes() {
		return fmt.Errorf("%w: block of %d bytes, want %d", ErrLayout, len(src), r.Layout.FullBlockBytes())
	}
	bb := r.Layout.BlockBytes()
	for rank := range r.Ranks {
		copy(r.BlockBytes(rank, layer, id), src[rank*bb:(rank+1)*bb])
	}
	return nil
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
