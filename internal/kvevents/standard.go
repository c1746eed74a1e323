package kvevents

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Event types of the standardized KV Events API (Mooncake's RFC #1527
// contract, docs/conductor.md): the event_type field of a Standard event.
const (
	EventStored  = "stored"
	EventRemoved = "removed"
	EventCleared = "cleared"
)

// Standard is one event in the standardized KV Events form: a map with an
// envelope (event_id, timestamp, event_type, model_name, block_size,
// additional_salt, lora_name, tenant_id, backend_id, medium, dp_rank) and,
// for stored, seq_hashes (rolling XXH3 sequence hashes), base_block_idx,
// parent_hash and token_ids; for removed, seq_hashes and base_block_idx.
// Mooncake's store master publishes this form, with object_key (its store
// key) and the legacy aliases type / block_hashes / parent_block_hash,
// which Decode also reads when the standard names are absent. Unset
// optional fields are zero (strings ""), nil (pointers) or empty.
type Standard struct {
	EventType      string
	EventID        uint64
	Timestamp      int64
	ModelName      string
	BlockSize      int
	AdditionalSalt string
	LoraName       string
	TenantID       string
	BackendID      string
	Medium         string
	DPRank         *int
	SeqHashes      []Hash
	BaseBlockIdx   *int
	ParentHash     *Hash
	TokenIDs       []int
	ObjectKey      string
	// Legacy adds the aliases Mooncake's store master writes beside the
	// standard names (its kv_events_emit_legacy_compat): type
	// (BlockStored / BlockRemoved), block_hashes (seq_hashes as int64) and,
	// for stored, parent_block_hash.
	Legacy bool
}

func (e Standard) wire() map[string]any {
	m := map[string]any{"event_id": e.EventID, "timestamp": e.Timestamp, "event_type": e.EventType,
		"model_name": nilOr(e.ModelName), "block_size": nilOr(e.BlockSize), "additional_salt": nilOr(e.AdditionalSalt),
		"lora_name": nilOr(e.LoraName), "tenant_id": e.TenantID, "backend_id": e.BackendID, "medium": nilOr(e.Medium)}
	if e.DPRank != nil {
		m["dp_rank"] = *e.DPRank
	} else {
		m["dp_rank"] = nil
	}
	if e.EventType == EventCleared {
		return m
	}
	m["seq_hashes"] = hashes(e.SeqHashes)
	if e.BaseBlockIdx != nil {
		m["base_block_idx"] = *e.BaseBlockIdx
	} else {
		m["base_block_idx"] = nil
	}
	if e.Legacy {
		m["type"] = TagBlockRemoved
		if e.EventType == EventStored {
			m["type"], m["parent_block_hash"] = TagBlockStored, nil
		}
		legacy := make([]any, len(e.SeqHashes))
		for i, h := range e.SeqHashes {
			legacy[i] = int64(h.Uint64())
		}
		m["block_hashes"] = legacy
	}
	if e.ObjectKey != "" {
		m["object_key"] = e.ObjectKey
	}
	if e.EventType == EventStored {
		if e.ParentHash != nil {
			m["parent_hash"] = e.ParentHash.wire()
		} else {
			m["parent_hash"] = nil
		}
		if e.TokenIDs != nil {
			m["token_ids"] = e.TokenIDs
		} else {
			m["token_ids"] = nil
		}
	}
	return m
}

// decodeStandard reads a map carrying event_type.
func decodeStandard(m map[string]any, et string) (Event, error) {
	var s Standard
	switch et {
	case EventStored, EventRemoved, EventCleared:
		s.EventType = et
	default:
		return nil, nil // a type this version does not know
	}
	if v := m["event_id"]; v != nil {
		n, ok := toUint64(v)
		if !ok {
			return nil, fmt.Errorf("event_id is %T", v)
		}
		s.EventID = n
	}
	if v := m["timestamp"]; v != nil {
		n, ok := toInt64(v)
		if !ok {
			if f, fok := toFloat(v); fok && !math.IsNaN(f) && math.Abs(f) < 1<<62 {
				n, ok = int64(f), true
			}
		}
		if !ok {
			return nil, fmt.Errorf("timestamp is %T", v)
		}
		s.Timestamp = n
	}
	for name, dst := range map[string]*string{"model_name": &s.ModelName, "additional_salt": &s.AdditionalSalt,
		"lora_name": &s.LoraName, "tenant_id": &s.TenantID, "backend_id": &s.BackendID, "medium": &s.Medium, "object_key": &s.ObjectKey} {
		if v := m[name]; v != nil {
			str, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%s is %T", name, v)
			}
			*dst = str
		}
	}
	if v := m["block_size"]; v != nil {
		n, ok := toInt(v)
		if !ok || n <= 0 {
			return nil, fmt.Errorf("block_size %v", v)
		}
		s.BlockSize = n
	}
	if v := m["dp_rank"]; v != nil {
		n, ok := toInt(v)
		if !ok || n < 0 {
			return nil, fmt.Errorf("dp_rank %v", v)
		}
		s.DPRank = &n
	}
	if s.EventType == EventCleared {
		return s, nil
	}
	hv := m["seq_hashes"]
	if hv == nil {
		hv = m["block_hashes"] // the legacy alias
	}
	if hv == nil {
		return nil, errors.New("seq_hashes missing")
	}
	hs, err := toHashes(hv)
	if err != nil {
		return nil, err
	}
	s.SeqHashes = hs
	if v := m["base_block_idx"]; v != nil {
		n, ok := toInt(v)
		if !ok || n < 0 {
			return nil, fmt.Errorf("base_block_idx %v", v)
		}
		s.BaseBlockIdx = &n
	}
	if s.EventType == EventRemoved {
		return s, nil
	}
	pv := m["parent_hash"]
	if pv == nil {
		pv = m["parent_block_hash"]
	}
	if pv != nil {
		h, ok := toHash(pv)
		if !ok {
			return nil, fmt.Errorf("parent_hash is %T", pv)
		}
		s.ParentHash = &h
	}
	if v := m["token_ids"]; v != nil {
		toks, ok := ints(v)
		if !ok {
			return nil, fmt.Errorf("token_ids is %T", v)
		}
		s.TokenIDs = make([]int, 0, len(toks))
		for _, n := range toks {
			if n < 0 || n > math.MaxUint32 {
				return nil, fmt.Errorf("token id %v", n)
			}
			s.TokenIDs = append(s.TokenIDs, int(n))
		}
		if s.BlockSize > 0 && len(s.TokenIDs) != len(s.SeqHashes)*s.BlockSize {
			return nil, fmt.Errorf("%d token ids for %d blocks of %d", len(s.TokenIDs), len(s.SeqHashes), s.BlockSize)
		}
	}
	return s, nil
}

func toUint64(v any) (uint64, bool) {
	if u, ok := v.(uint64); ok {
		return u, true
	}
	n, ok := toInt64(v)
	if !ok || n < 0 {
		return 0, false
	}
	return uint64(n), true
}

// ParseKeyHash reads a rolling sequence hash out of a store object key, as
// Mooncake's master does: the key is a decimal u64 or 0x-prefixed hex.
func ParseKeyHash(key string) (uint64, bool) {
	if h, ok := strings.CutPrefix(key, "0x"); ok {
		if len(h) == 0 || len(h) > 16 {
			return 0, false
		}
		v, err := strconv.ParseUint(h, 16, 64)
		if err != nil {
			return 0, false
		}
		return v, true
	}
	if len(key) == 0 || len(key) > 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(key, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// StandardConfig is what a store master's events in the Standard form
// carry beside each object (Mooncake's kv_events_* master flags).
type StandardConfig struct {
	BackendID string // backend_id of every event
	TenantID  string // tenant_id of objects outside every tenant
	Legacy    bool   // the legacy aliases (Standard.Legacy)
	// ObjectKey writes object_key, and publishes keys that are no hash
	// (ParseSeqHash) with empty seq_hashes; off, those are skipped.
	ObjectKey bool
}

// ParseSeqHash reads a store key that is a u64 sequence hash, in decimal
// or 0x-prefixed hex (Mooncake's ParseSeqHashFromObjectKey).
func ParseSeqHash(key string) (uint64, bool) {
	base, digits := 10, key
	if len(key) > 2 && (key[:2] == "0x" || key[:2] == "0X") {
		base, digits = 16, key[2:]
	}
	v, err := strconv.ParseUint(digits, base, 64) // no sign, no spaces, no prefix of its own
	return v, err == nil
}

// StoreEvent is the Standard event of a store object (key, of tenant
// tenantID: "" for the config's) stored in or removed from medium ("cpu",
// "disk"), as Mooncake's store master publishes it; ok is false when the
// object is not published (a key that is no hash, without ObjectKey).
func (c StandardConfig) StoreEvent(kind, key, tenantID, medium string, id uint64, ts int64) (e Standard, ok bool) {
	h, isHash := ParseSeqHash(key)
	if !isHash && (!c.ObjectKey || key == "") {
		return Standard{}, false
	}
	if tenantID == "" {
		tenantID = c.TenantID
	}
	e = Standard{EventType: kind, EventID: id, Timestamp: ts, TenantID: tenantID, BackendID: c.BackendID, Medium: medium,
		SeqHashes: []Hash{}, Legacy: c.Legacy}
	if isHash {
		e.SeqHashes = []Hash{IntHash(h)}
	}
	if c.ObjectKey {
		e.ObjectKey = key
	}
	if kind == EventStored {
		zero := 0
		e.BaseBlockIdx = &zero // a pool's object is a standalone block
	}
	return e, true
}
