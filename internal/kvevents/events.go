package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrBadPayload wraps every payload Decode refuses.
var ErrBadPayload = errors.New("kvevents: bad payload")

// Event tags.
const (
	TagBlockStored      = "BlockStored"
	TagBlockRemoved     = "BlockRemoved"
	TagAllBlocksCleared = "AllBlocksCleared"
)

// MediumGPU is vLLM's medium of device blocks (ours are host memory, but
// routers filter on it).
const MediumGPU = "GPU"

// Hash is a block hash as published: an integer or bytes.
type Hash struct {
	Bytes   []byte
	Int     uint64
	IsBytes bool
}

// IntHash and BytesHash build hashes.
func IntHash(v uint64) Hash { return Hash{Int: v} }
func BytesHash(b []byte) Hash {
	c := make([]byte, len(b))
	copy(c, b)
	return Hash{Bytes: c, IsBytes: true}
}

// Key is a map key unique per hash (ints and bytes never collide).
func (h Hash) Key() string {
	if h.IsBytes {
		return "b" + string(h.Bytes)
	}
	return "i" + strconv.FormatUint(h.Int, 10)
}

// Uint64 is the integer, or the last 8 bytes big-endian (llm-d's reading).
func (h Hash) Uint64() uint64 {
	if !h.IsBytes {
		return h.Int
	}
	var b [8]byte
	n := len(h.Bytes)
	copy(b[8-min(8, n):], h.Bytes[max(0, n-8):])
	return binary.BigEndian.Uint64(b[:])
}

func (h Hash) wire() any {
	if h.IsBytes {
		return h.Bytes
	}
	return h.Int
}

// Event is one of BlockStored, BlockRemoved, AllBlocksCleared.
type Event interface{ tag() string }

// BlockStored: blocks entered the prefix cache. BlockHashes[i] holds
// TokenIDs[i*BlockSize:(i+1)*BlockSize]; the first block's parent is
// ParentBlockHash (nil: the sequence's first block).
type BlockStored struct {
	BlockHashes     []Hash
	ParentBlockHash *Hash
	TokenIDs        []int
	BlockSize       int
	LoraID          *int
	Medium          string
	LoraName        string
	// GroupIdx is the KV cache group of hybrid models (nil: the only one);
	// KVCacheSpecKind names its kind ("full_attention", "sliding_window",
	// ...). A prefix index keeps full-attention groups only.
	GroupIdx        *int
	KVCacheSpecKind string
	// ExtraKeys are, per block (nil or one per block hash), what vLLM
	// hashed into the block besides its tokens (VLLMExtraKeys): nil, or
	// strings (LoRA name, cache salt), MMKey, []byte (prompt embeddings'
	// hash), or other values as decoded.
	ExtraKeys [][]any
}

// BlockRemoved: blocks left the prefix cache.
type BlockRemoved struct {
	BlockHashes []Hash
	Medium      string
	GroupIdx    *int
}

// AllBlocksCleared: the prefix cache was reset.
type AllBlocksCleared struct{}

func (Standard) tag() string         { return "Standard" }
func (BlockStored) tag() string      { return TagBlockStored }
func (BlockRemoved) tag() string     { return TagBlockRemoved }
func (AllBlocksCleared) tag() string { return TagAllBlocksCleared }

// Batch is vLLM's EventBatch.
type Batch struct {
	TS     float64
	Events []Event
	DPRank *int
	// MillisTS encodes TS as integer milliseconds (Mooncake's store
	// master's batches) instead of float seconds (vLLM's).
	MillisTS bool
}

func hashes(hs []Hash) []any {
	out := make([]any, len(hs))
	for i, h := range hs {
		out[i] = h.wire()
	}
	return out
}

func nilOr[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// Encode writes b as msgpack, in the map encoding (newer vLLM) or the
// array encoding (older vLLM).
func Encode(b Batch, mapEncoding bool) ([]byte, error) {
	evs := make([]any, 0, len(b.Events))
	for _, e := range b.Events {
		switch e := e.(type) {
		case BlockStored:
			var parent any
			if e.ParentBlockHash != nil {
				parent = e.ParentBlockHash.wire()
			}
			var lora any
			if e.LoraID != nil {
				lora = *e.LoraID
			}
			if mapEncoding {
				m := map[string]any{"type": TagBlockStored, "block_hashes": hashes(e.BlockHashes), "parent_block_hash": parent,
					"token_ids": e.TokenIDs, "block_size": e.BlockSize, "lora_id": lora, "medium": nilOr(e.Medium), "lora_name": nilOr(e.LoraName)}
				if e.GroupIdx != nil {
					m["group_idx"] = *e.GroupIdx
				}
				if e.KVCacheSpecKind != "" {
					m["kv_cache_spec_kind"] = e.KVCacheSpecKind
				}
				if e.ExtraKeys != nil {
					m["extra_keys"] = extraKeysWire(e.ExtraKeys)
				}
				evs = append(evs, m)
			} else {
				evs = append(evs, []any{TagBlockStored, hashes(e.BlockHashes), parent, e.TokenIDs, e.BlockSize, lora, nilOr(e.Medium)})
			}
		case BlockRemoved:
			if mapEncoding {
				m := map[string]any{"type": TagBlockRemoved, "block_hashes": hashes(e.BlockHashes), "medium": nilOr(e.Medium)}
				if e.GroupIdx != nil {
					m["group_idx"] = *e.GroupIdx
				}
				evs = append(evs, m)
			} else {
				evs = append(evs, []any{TagBlockRemoved, hashes(e.BlockHashes), nilOr(e.Medium)})
			}
		case Standard:
			evs = append(evs, e.wire())
		case AllBlocksCleared:
			if mapEncoding {
				evs = append(evs, map[string]any{"type": TagAllBlocksCleared})
			} else {
				evs = append(evs, []any{TagAllBlocksCleared})
			}
		default:
			return nil, fmt.Errorf("kvevents: unknown event %T", e)
		}
	}
	var dp any
	if b.DPRank != nil {
		dp = *b.DPRank
	}
	var ts any = b.TS
	if b.MillisTS {
		ts = int64(math.Round(b.TS * 1e3))
	}
	var v any = []any{ts, evs, dp}
	if mapEncoding {
		m := map[string]any{"ts": ts, "events": evs}
		if dp != nil {
			m["data_parallel_rank"] = dp
		}
		v = m
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Decode reads a payload in either encoding. Unknown event tags are
// skipped (newer vLLM versions add events); unknown fields are ignored.
func Decode(payload []byte) (Batch, error) {
	dec := msgpack.NewDecoder(bytes.NewReader(payload))
	v, err := decodeValue(dec, 0, len(payload))
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	var b Batch
	var evs []any
	switch x := v.(type) {
	case []any:
		if len(x) < 2 {
			return b, fmt.Errorf("%w: batch array of %d fields", ErrBadPayload, len(x))
		}
		ts, ok := toFloat(x[0])
		if !ok {
			return b, fmt.Errorf("%w: ts is %T", ErrBadPayload, x[0])
		}
		b.TS = ts
		if evs, ok = x[1].([]any); !ok && x[1] != nil {
			return b, fmt.Errorf("%w: events is %T", ErrBadPayload, x[1])
		}
		if len(x) > 2 && x[2] != nil {
			dp, ok := toInt(x[2])
			if !ok {
				return b, fmt.Errorf("%w: data_parallel_rank is %T", ErrBadPayload, x[2])
			}
			b.DPRank = &dp
		}
	case map[string]any:
		m := x
		ts, ok := toFloat(m["ts"])
		if !ok {
			return b, fmt.Errorf("%w: ts is %T", ErrBadPayload, m["ts"])
		}
		b.TS = ts
		if evs, ok = m["events"].([]any); !ok && m["events"] != nil {
			return b, fmt.Errorf("%w: events is %T", ErrBadPayload, m["events"])
		}
		if d := m["data_parallel_rank"]; d != nil {
			dp, ok := toInt(d)
			if !ok {
				return b, fmt.Errorf("%w: data_parallel_rank is %T", ErrBadPayload, d)
			}
			b.DPRank = &dp
		}
	default:
		return b, fmt.Errorf("%w: batch is %T", ErrBadPayload, v)
	}
	for i, e := range evs {
		ev, err := decodeEvent(e)
		if err != nil {
			return Batch{}, fmt.Errorf("%w: event %d: %v", ErrBadPayload, i, err)
		}
		if ev != nil {
			b.Events = append(b.Events, ev)
		}
	}
	return b, nil
}

// fields of each event in the array encoding, after the tag.
var arrayFields = map[string][]string{
	TagBlockStored: {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
		"extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"},
	TagBlockRemoved:     {"block_hashes", "medium", "group_idx"},
	TagAllBlocksCleared: {},
}

func decodeEvent(e any) (Event, error) {
	var m map[string]any
	var tag string
	switch x := e.(type) {
	case []any:
		if len(x) == 0 {
			return nil, errors.New("empty event")
		}
		t, ok := x[0].(string)
		if !ok {
			return nil, fmt.Errorf("tag is %T", x[0])
		}
		tag, m = t, map[string]any{}
		names, known := arrayFields[t]
		if !known {
			return nil, nil
		}
		for i, v := range x[1:] {
			if i < len(names) {
				m[names[i]] = v
			}
		}
	case map[string]any:
		m = x
		if et, ok := m["event_type"].(string); ok {
			return decodeStandard(m, et)
		}
		t, ok := m["type"].(string)
		if !ok {
			return nil, fmt.Errorf("tag is %T", m["type"])
		}
		tag = t
	default:
		return nil, fmt.Errorf("event is %T", e)
	}
	switch tag {
	case TagBlockStored:
		var s BlockStored
		var err error
		if s.BlockHashes, err = toHashes(m["block_hashes"]); err != nil {
			return nil, err
		}
		if p := m["parent_block_hash"]; p != nil {
			h, ok := toHash(p)
			if !ok {
				return nil, fmt.Errorf("parent_block_hash is %T", p)
			}
			s.ParentBlockHash = &h
		}
		if tv := m["token_ids"]; tv != nil {
			if l, ok := tv.([]any); ok && len(l) == 0 {
				// an empty list stays empty
			} else {
				toks, ok := ints(tv)
				if !ok {
					return nil, fmt.Errorf("token_ids is %T", tv)
				}
				s.TokenIDs = make([]int, 0, len(toks))
				for _, n := range toks {
					if n > math.MaxInt32 || n < math.MinInt32 {
						return nil, fmt.Errorf("token id %d", n)
					}
					s.TokenIDs = append(s.TokenIDs, int(n))
				}
			}
		}
		bs, ok := toInt(m["block_size"])
		if !ok || bs <= 0 {
			return nil, fmt.Errorf("block_size %v", m["block_size"])
		}
		s.BlockSize = bs
		if l := m["lora_id"]; l != nil {
			if n, ok := toInt(l); ok {
				s.LoraID = &n
			}
		}
		s.Medium, _ = m["medium"].(string)
		s.LoraName, _ = m["lora_name"].(string)
		if g, ok := toInt(m["group_idx"]); ok {
			s.GroupIdx = &g
		}
		s.KVCacheSpecKind, _ = m["kv_cache_spec_kind"].(string)
		if x := m["extra_keys"]; x != nil {
			if s.ExtraKeys, err = toExtraKeys(x, len(s.BlockHashes)); err != nil {
				return nil, err
			}
		}
		if len(s.TokenIDs) != 0 && len(s.TokenIDs) != len(s.BlockHashes)*s.BlockSize {
			return nil, fmt.Errorf("%d token ids for %d blocks of %d", len(s.TokenIDs), len(s.BlockHashes), s.BlockSize)
		}
		return s, nil
	case TagBlockRemoved:
		hs, err := toHashes(m["block_hashes"])
		if err != nil {
			return nil, err
		}
		med, _ := m["medium"].(string)
		r := BlockRemoved{BlockHashes: hs, Medium: med}
		if g, ok := toInt(m["group_idx"]); ok {
			r.GroupIdx = &g
		}
		return r, nil
	case TagAllBlocksCleared:
		return AllBlocksCleared{}, nil
	}
	return nil, nil // an event this version does not know
}

// toExtraKeys reads extra_keys: one entry per block, each nil or an
// array of keys; a [string, int] pair is a multimodal key.
func toExtraKeys(v any, blocks int) ([][]any, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("extra_keys is %T", v)
	}
	if len(l) != blocks {
		return nil, fmt.Errorf("%d extra_keys for %d blocks", len(l), blocks)
	}
	out := make([][]any, len(l))
	for i, e := range l {
		if e == nil {
			continue
		}
		keys, ok := e.([]any)
		if !ok {
			if il, isInts := e.(intList); isInts {
				keys = make([]any, len(il))
				for j, n := range il {
					keys[j] = n
				}
			} else {
				return nil, fmt.Errorf("extra_keys[%d] is %T", i, e)
			}
		}
		ks := make([]any, len(keys))
		for j, k := range keys {
			ks[j] = k
			if pair, ok := k.([]any); ok && len(pair) == 2 {
				id, isStr := pair[0].(string)
				off, isInt := toInt(pair[1])
				if isStr && isInt {
					ks[j] = MMKey{Identifier: id, Offset: off}
				}
			}
		}
		out[i] = ks
	}
	return out, nil
}

// extraKeysWire writes extra keys as vLLM does: MMKey as [id, offset].
func extraKeysWire(x [][]any) []any {
	out := make([]any, len(x))
	for i, keys := range x {
		if keys == nil {
			continue
		}
		l := make([]any, len(keys))
		for j, k := range keys {
			if m, ok := k.(MMKey); ok {
				l[j] = []any{m.Identifier, m.Offset}
			} else {
				l[j] = k
			}
		}
		out[i] = l
	}
	return out
}

// intList is an array whose elements are all integers, as decoded (a
// uint64 above MaxInt64 keeps its bits).
type intList []int64

func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64) || (c >= msgpcode.Int8 && c <= msgpcode.Int64)
}

// ints reads an array of integers in either decoded form.
func ints(v any) ([]int64, bool) {
	switch x := v.(type) {
	case intList:
		return x, true
	case []any:
		out := make([]int64, 0, len(x))
		for _, e := range x {
			n, ok := toInt64(e)
			if !ok {
				return nil, false
			}
			out = append(out, n)
		}
		return out, true
	}
	return nil, false
}

// maxDepth bounds nesting in a payload (a batch is 4 deep).
const maxDepth = 16

// decodeValue reads one msgpack value: arrays as []any, maps as
// map[string]any (keys of other types skipped), scalars as the library
// decodes them. Lengths are checked against the payload's size before
// anything is allocated (each element takes at least one byte), so a
// hostile header cannot make it allocate more than the payload.
func decodeValue(d *msgpack.Decoder, depth, size int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("nested too deep")
	}
	c, err := d.PeekCode()
	if err != nil {
		return nil, err
	}
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.DecodeArrayLen()
		if err != nil || n < 0 {
			return nil, err
		}
		if n > size {
			return nil, fmt.Errorf("array of %d elements in %d bytes", n, size)
		}
		// Arrays of integers (token ids, hashes: most of a payload) decode
		// into an intList without boxing each element.
		var ints intList
		i := 0
		for ; i < n; i++ {
			c, err := d.PeekCode()
			if err != nil {
				return nil, err
			}
			if !isInt(c) {
				break
			}
			if ints == nil {
				ints = make(intList, 0, n)
			}
			var v int64
			if c == msgpcode.Uint64 {
				u, err := d.DecodeUint64()
				if err != nil {
					return nil, err
				}
				v = int64(u) // the bits: a hash; as a token id it is refused
			} else if v, err = d.DecodeInt64(); err != nil {
				return nil, err
			}
			ints = append(ints, v)
		}
		if i == n && n > 0 {
			return ints, nil
		}
		out := make([]any, 0, n)
		for _, v := range ints {
			out = append(out, v)
		}
		for ; i < n; i++ {
			v, err := decodeValue(d, depth+1, size)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.DecodeMapLen()
		if err != nil || n < 0 {
			return nil, err
		}
		if 2*n > size {
			return nil, fmt.Errorf("map of %d entries in %d bytes", n, size)
		}
		m := make(map[string]any, n)
		for i := 0; i < n; i++ {
			k, err := decodeValue(d, depth+1, size)
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(d, depth+1, size)
			if err != nil {
				return nil, err
			}
			if s, ok := k.(string); ok {
				m[s] = v
			}
		}
		return m, nil
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		n, err := d.DecodeBytesLen()
		if err != nil || n < 0 {
			return nil, err
		}
		if n > size {
			return nil, fmt.Errorf("%d bytes of string in %d bytes", n, size)
		}
		b := make([]byte, n)
		if err := d.ReadFull(b); err != nil {
			return nil, err
		}
		if msgpcode.IsString(c) {
			return string(b), nil
		}
		return b, nil
	case msgpcode.IsExt(c):
		return nil, errors.New("msgpack extension types are not used by KV events")
	}
	return d.DecodeInterface()
}

func toHashes(v any) ([]Hash, error) {
	if il, ok := v.(intList); ok {
		out := make([]Hash, len(il))
		for i, n := range il {
			out[i] = IntHash(uint64(n))
		}
		return out, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("block_hashes is %T", v)
	}
	out := make([]Hash, 0, len(l))
	for _, x := range l {
		h, ok := toHash(x)
		if !ok {
			return nil, fmt.Errorf("block hash is %T", x)
		}
		out = append(out, h)
	}
	return out, nil
}

func toHash(v any) (Hash, bool) {
	switch x := v.(type) {
	case []byte:
		return BytesHash(x), true
	case uint64:
		return IntHash(x), true
	}
	if n, ok := toInt64(v); ok {
		return IntHash(uint64(n)), true
	}
	return Hash{}, false
}

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}

func toInt(v any) (int, bool) {
	n, ok := toInt64(v)
	if !ok || n > math.MaxInt32 || n < math.MinInt32 {
		return 0, false
	}
	return int(n), true
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	}
	if n, ok := toInt64(v); ok {
		return float64(n), true
	}
	return 0, false
}
