package kvevents

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/fxamacker/cbor/v2"
	"github.com/zeebo/xxh3"
)

// VLLMHashAlgo is vLLM's prefix-caching hash function
// (--prefix-caching-hash-algo): SHA-256 or XXH3-128 over the pickled or
// CBOR-encoded tuple (parent hash, block tokens, extra keys).
type VLLMHashAlgo string

// vLLM's prefix-caching hash functions.
const (
	VLLMSHA256     VLLMHashAlgo = "sha256"      // pickle, SHA-256 (vLLM's default)
	VLLMSHA256CBOR VLLMHashAlgo = "sha256_cbor" // canonical CBOR, SHA-256
	VLLMXXHash     VLLMHashAlgo = "xxhash"      // pickle, XXH3-128
	VLLMXXHashCBOR VLLMHashAlgo = "xxhash_cbor" // canonical CBOR, XXH3-128
)

// MMKey is a multimodal input's extra key in a block: the input's
// identifier (its content hash) and its offset from the block's first
// token (negative when the input began in an earlier block).
type MMKey struct {
	Identifier string
	Offset     int
}

// MMFeature places a multimodal input in a prompt: its identifier and
// the token range [Offset, Offset+Length) its placeholder tokens fill.
type MMFeature struct {
	Identifier string `json:"identifier"`
	Offset     int    `json:"offset"`
	Length     int    `json:"length"`
}

// VLLMRequest is what of a request, besides its tokens, vLLM hashes into
// its blocks: the LoRA adapter's name, the multimodal inputs (sorted by
// offset) and the cache salt.
type VLLMRequest struct {
	LoraName  string
	MM        []MMFeature
	CacheSalt string
}

// VLLMExtraKeys are the extra keys of each of a request's first n blocks
// as vLLM forms them (generate_block_hash_extra_keys): the LoRA name in
// every block, then an MMKey for every multimodal input the block
// overlaps, then the cache salt in the first block. A block without any
// is nil. Elements are string or MMKey.
func VLLMExtraKeys(r VLLMRequest, blockSize, n int) [][]any {
	out := make([][]any, n)
	mm := 0
	for b := 0; b < n; b++ {
		start, end := b*blockSize, (b+1)*blockSize
		var keys []any
		if r.LoraName != "" {
			keys = append(keys, r.LoraName)
		}
		for mm < len(r.MM) {
			f := r.MM[mm]
			if end <= f.Offset {
				break // the input starts in a later block
			}
			if start >= f.Offset+f.Length {
				mm++ // the block is past it
				continue
			}
			keys = append(keys, MMKey{Identifier: f.Identifier, Offset: f.Offset - start})
			if end < f.Offset+f.Length {
				break // the input goes on into the next block
			}
			mm++
		}
		if b == 0 && r.CacheSalt != "" {
			keys = append(keys, r.CacheSalt)
		}
		out[b] = keys
	}
	return out
}

// VLLMHasher computes vLLM's block hashes: block i's is
// Algo((hash of block i-1, tuple(tokens of block i), extra keys or None)),
// block 0's parent being NoneHash.
type VLLMHasher struct {
	Algo VLLMHashAlgo
	// NoneHash is the first block's parent: Algo(PYTHONHASHSEED) in vLLM.
	// An engine without PYTHONHASHSEED draws it at random, and its hashes
	// cannot be reproduced.
	NoneHash []byte
}

// NewVLLMHasher returns the hasher of an engine run with algo and
// PYTHONHASHSEED=pythonHashSeed.
func NewVLLMHasher(algo VLLMHashAlgo, pythonHashSeed string) (VLLMHasher, error) {
	h := VLLMHasher{Algo: algo}
	none, err := h.digest(pythonHashSeed)
	if err != nil {
		return VLLMHasher{}, err
	}
	h.NoneHash = none
	return h, nil
}

// Block is the hash of one block after parent (nil: the first block),
// with its extra keys (nil: none; elements string, MMKey or []byte).
func (h VLLMHasher) Block(parent []byte, tokens []int, extra []any) ([]byte, error) {
	if len(parent) == 0 {
		parent = h.NoneHash
	}
	return h.digest(vllmTuple{parent: parent, tokens: tokens, extra: extra})
}

// Request is the hashes of the complete blocks of a request's tokens.
func (h VLLMHasher) Request(r VLLMRequest, tokens []int, blockSize int) ([][]byte, error) {
	if blockSize <= 0 {
		return nil, fmt.Errorf("kvevents: block size %d", blockSize)
	}
	n := len(tokens) / blockSize
	extra := VLLMExtraKeys(r, blockSize, n)
	out := make([][]byte, n)
	var parent []byte
	for b := range out {
		hb, err := h.Block(parent, tokens[b*blockSize:(b+1)*blockSize], extra[b])
		if err != nil {
			return nil, err
		}
		out[b], parent = hb, hb
	}
	return out, nil
}

// ContentKeys are the extra keys that name a block's content rather than
// its namespace: every key but the strings (the LoRA name and the cache
// salt, which a router keys as identity dimensions), in order, as
// canonical CBOR; nil when there are none.
func ContentKeys(keys []any) []byte {
	var content []any
	for _, k := range keys {
		if _, isStr := k.(string); !isStr {
			content = append(content, cborValue(k))
		}
	}
	if len(content) == 0 {
		return nil
	}
	b, err := cborMode.Marshal(content)
	if err != nil {
		// a decoded value CBOR cannot write (none of msgpack's): name it
		// by its printed form rather than not at all
		b = []byte(fmt.Sprint(content))
	}
	return b
}

// RequestSalt is the cache salt among a first block's extra keys: the
// string that is not the LoRA name ("" when none).
func RequestSalt(keys []any, loraName string) string {
	for i, k := range keys {
		if s, ok := k.(string); ok && !(i == 0 && s == loraName && loraName != "") {
			return s
		}
	}
	return ""
}

// VLLMIntHash is the integer form of a block hash that vLLM publishes
// with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: its last 8 bytes, big-endian.
func VLLMIntHash(h []byte) uint64 {
	if len(h) >= 8 {
		return binary.BigEndian.Uint64(h[len(h)-8:])
	}
	var b [8]byte
	copy(b[8-len(h):], h)
	return binary.BigEndian.Uint64(b[:])
}

// vllmTuple is hash_block_tokens' argument.
type vllmTuple struct {
	parent []byte
	tokens []int
	extra  []any
}

func (h VLLMHasher) digest(v any) ([]byte, error) {
	var in []byte
	switch h.Algo {
	case VLLMSHA256, VLLMXXHash:
		p := &pickler{}
		if err := p.dump(v); err != nil {
			return nil, err
		}
		in = p.out
	case VLLMSHA256CBOR, VLLMXXHashCBOR:
		b, err := cborMode.Marshal(cborValue(v))
		if err != nil {
			return nil, fmt.Errorf("kvevents: cbor: %w", err)
		}
		in = b
	default:
		return nil, fmt.Errorf("kvevents: unknown vLLM hash algorithm %q (want sha256, sha256_cbor, xxhash, xxhash_cbor)", h.Algo)
	}
	if h.Algo == VLLMSHA256 || h.Algo == VLLMSHA256CBOR {
		s := sha256.Sum256(in)
		return s[:], nil
	}
	x := xxh3.Hash128(in).Bytes()
	return x[:], nil
}

// cborMode is cbor2.dumps(canonical=True) for the values hashed: definite
// lengths, shortest integer forms.
var cborMode = func() cbor.EncMode {
	m, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return m
}()

// cborValue turns a hashed value into what the CBOR library encodes as
// cbor2 does a Python tuple: arrays for tuples, nil for None.
func cborValue(v any) any {
	switch v := v.(type) {
	case vllmTuple:
		var extra any
		if v.extra != nil {
			extra = cborValue(v.extra)
		}
		return []any{v.parent, v.tokens, extra}
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cborValue(e)
		}
		return out
	case MMKey:
		return []any{v.Identifier, v.Offset}
	}
	return v
}

// pickler writes pickle protocol 5 exactly as CPython's C pickler does,
// for the value shapes vLLM hashes (tuples, ints, bytes, str, None), so
// that SHA-256/XXH3 over it equals vLLM's default block hash. Hand-written:
// no Go pickle library writes CPython's framing and memo opcodes
// byte-for-byte, and only this subset is needed. Equal values are never
// the same Python object here, so no memo is ever read back (no BINGET).
type pickler struct {
	out        []byte
	frameStart int // offset of the current frame's 9-byte header
}

const (
	frameSizeTarget = 64 << 10
	frameSizeMin    = 4
)

func (p *pickler) dump(v any) error {
	p.out = append(p.out[:0], 0x80, 5) // PROTO 5
	p.startFrame()
	if err := p.save(v); err != nil {
		return err
	}
	p.out = append(p.out, '.') // STOP
	p.commitFrame()
	return nil
}

func (p *pickler) startFrame() {
	p.frameStart = len(p.out)
	p.out = append(p.out, make([]byte, 9)...)
}

func (p *pickler) commitFrame() {
	n := len(p.out) - p.frameStart - 9
	if n >= frameSizeMin {
		p.out[p.frameStart] = 0x95 // FRAME
		binary.LittleEndian.PutUint64(p.out[p.frameStart+1:], uint64(n))
		return
	}
	copy(p.out[p.frameStart:], p.out[p.frameStart+9:])
	p.out = p.out[:len(p.out)-9]
}

// boundary ends a frame that reached the target size after an object,
// as the C pickler does after every save.
func (p *pickler) boundary() {
	if len(p.out)-p.frameStart-9 >= frameSizeTarget {
		p.commitFrame()
		p.startFrame()
	}
}

func (p *pickler) save(v any) error {
	switch v := v.(type) {
	case nil:
		p.out = append(p.out, 'N')
	case int:
		p.saveInt(int64(v))
	case int64:
		p.saveInt(v)
	case string:
		if len(v) <= 0xff {
			p.out = append(p.out, 0x8c, byte(len(v))) // SHORT_BINUNICODE
		} else {
			p.out = append(p.out, 'X') // BINUNICODE
			p.out = binary.LittleEndian.AppendUint32(p.out, uint32(len(v)))
		}
		p.out = append(p.out, v...)
		p.out = append(p.out, 0x94) // MEMOIZE
	case []byte:
		if len(v) <= 0xff {
			p.out = append(p.out, 'C', byte(len(v))) // SHORT_BINBYTES
		} else {
			p.out = append(p.out, 'B') // BINBYTES
			p.out = binary.LittleEndian.AppendUint32(p.out, uint32(len(v)))
		}
		p.out = append(p.out, v...)
		p.out = append(p.out, 0x94)
	case MMKey:
		return p.saveTuple([]any{v.Identifier, v.Offset})
	case []any:
		return p.saveTuple(v)
	case vllmTuple:
		var extra any
		if v.extra != nil {
			extra = v.extra
		}
		ts := make([]any, len(v.tokens))
		for i, t := range v.tokens {
			ts[i] = t
		}
		return p.saveTuple([]any{v.parent, ts, extra})
	default:
		return fmt.Errorf("kvevents: cannot pickle %T", v)
	}
	p.boundary()
	return nil
}

func (p *pickler) saveTuple(items []any) error {
	if len(items) == 0 {
		p.out = append(p.out, ')') // EMPTY_TUPLE
		p.boundary()
		return nil
	}
	if len(items) > 3 {
		p.out = append(p.out, '(') // MARK
	}
	for _, e := range items {
		if err := p.save(e); err != nil {
			return err
		}
	}
	switch len(items) {
	case 1, 2, 3:
		p.out = append(p.out, 0x84+byte(len(items))) // TUPLE1..3
	default:
		p.out = append(p.out, 't') // TUPLE
	}
	p.out = append(p.out, 0x94)
	p.boundary()
	return nil
}

func (p *pickler) saveInt(v int64) {
	switch {
	case v >= 0 && v <= 0xff:
		p.out = append(p.out, 'K', byte(v)) // BININT1
	case v >= 0 && v <= 0xffff:
		p.out = append(p.out, 'M', byte(v), byte(v>>8)) // BININT2
	case v >= -1<<31 && v < 1<<31:
		p.out = append(p.out, 'J') // BININT
		p.out = binary.LittleEndian.AppendUint32(p.out, uint32(int32(v)))
	default:
		// LONG1: |v|'s bit length/8+1 bytes of v in little-endian two's
		// complement, less a redundant trailing 0xff of a negative v
		// (CPython's save_long).
		abs := uint64(v)
		if v < 0 {
			abs = -abs
		}
		n := (64-bits.LeadingZeros64(abs))/8 + 1
		b := make([]byte, n)
		for i := range b {
			if i < 8 {
				b[i] = byte(uint64(v) >> (8 * i))
			} else if v < 0 {
				b[i] = 0xff
			}
		}
		if v < 0 && n > 1 && b[n-1] == 0xff && b[n-2]&0x80 != 0 {
			n--
			b = b[:n]
		}
		p.out = append(p.out, 0x8a, byte(n))
		p.out = append(p.out, b...)
	}
}
