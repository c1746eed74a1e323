package kvevents

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func standardSample() Batch {
	dp, base := 0, 5
	p := IntHash(9999999999)
	return Batch{TS: 2, Events: []Event{
		Standard{EventType: EventStored, EventID: 42, Timestamp: 1739145600000, ModelName: "llama-3.1-8b", BlockSize: 2,
			TenantID: "default", BackendID: "worker-0", Medium: "gpu", DPRank: &dp,
			SeqHashes: []Hash{IntHash(1234567890), IntHash(1 << 63)}, BaseBlockIdx: &base, ParentHash: &p, TokenIDs: []int{1, 2, 3, 4}},
		Standard{EventType: EventRemoved, EventID: 43, TenantID: "default", BackendID: "worker-0", Medium: "gpu", SeqHashes: []Hash{IntHash(1122334455)}},
		Standard{EventType: EventCleared, EventID: 44, TenantID: "default", BackendID: "worker-0"},
	}}
}

func TestStandardRoundTrip(t *testing.T) {
	for _, m := range []bool{false, true} {
		b, err := Encode(standardSample(), m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, standardSample()) {
			t.Fatalf("map %v:\n got %#v\nwant %#v", m, got, standardSample())
		}
	}
}

// The shape Mooncake's store master publishes: RFC field names with nil
// envelope fields, object_key, and the legacy aliases (type, block_hashes,
// parent_block_hash) that must not make it a vLLM event.
func TestDecodeMooncakeMasterShape(t *testing.T) {
	payload, _ := msgpack.Marshal([]any{int64(1739145600000), []any{
		map[string]any{"event_id": uint64(7), "timestamp": int64(1739145600000), "event_type": "stored", "type": "BlockStored",
			"model_name": nil, "block_size": nil, "additional_salt": nil, "lora_name": nil, "tenant_id": "t1", "backend_id": "daemon-1",
			"group_id": nil, "medium": "cpu", "dp_rank": nil, "seq_hashes": []any{uint64(77)}, "block_hashes": []any{uint64(77)},
			"object_key": "77", "base_block_idx": 0, "parent_hash": nil, "parent_block_hash": nil, "token_ids": nil},
		map[string]any{"event_id": uint64(8), "event_type": "removed", "type": "BlockRemoved", "tenant_id": "t1", "backend_id": "daemon-1",
			"medium": "disk", "seq_hashes": []any{}, "block_hashes": []any{}, "object_key": "kv/abc", "base_block_idx": 0},
		map[string]any{"event_type": "renamed"}, // a type this version does not know: skipped
	}, 0})
	b, err := Decode(payload)
	if err != nil || len(b.Events) != 2 {
		t.Fatalf("%#v %v", b, err)
	}
	s := b.Events[0].(Standard)
	if s.EventID != 7 || s.TenantID != "t1" || s.Medium != "cpu" || s.ObjectKey != "77" || len(s.SeqHashes) != 1 || s.SeqHashes[0].Int != 77 ||
		s.ParentHash != nil || s.TokenIDs != nil || s.DPRank != nil || *s.BaseBlockIdx != 0 {
		t.Fatalf("stored %#v", s)
	}
	if r := b.Events[1].(Standard); r.EventType != EventRemoved || r.ObjectKey != "kv/abc" || len(r.SeqHashes) != 0 {
		t.Fatalf("removed %#v", r)
	}
	for _, bad := range []map[string]any{
		{"event_type": "stored"}, // no seq_hashes
		{"event_type": "stored", "seq_hashes": []any{1}, "block_size": 2, "token_ids": []any{1}},
		{"event_type": "stored", "seq_hashes": []any{1}, "token_ids": []any{-1}},
		{"event_type": "removed", "seq_hashes": "x"},
		{"event_type": "cleared", "dp_rank": -1},
		{"event_type": "cleared", "tenant_id": 3},
	} {
		p, _ := msgpack.Marshal([]any{1.0, []any{bad}})
		if _, err := Decode(p); err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
	for key, want := range map[string]uint64{"123": 123, "0xff": 255, "0x": 0, "abc": 0, "18446744073709551615": 1<<64 - 1, "18446744073709551616": 0} {
		got, ok := ParseKeyHash(key)
		if got != want || ok != (want != 0 || key == "0") {
			t.Errorf("ParseKeyHash(%q) = %d %v", key, got, ok)
		}
	}
}

// TestParseSeqHash: decimal and 0x-hex u64 keys are hashes; anything else
// (signs, spaces, overflow, other text) is not.
func TestParseSeqHash(t *testing.T) {
	for key, want := range map[string]uint64{"0": 0, "31": 31, "0x1f": 31, "0X1F": 31, "18446744073709551615": 1<<64 - 1, "0xffffffffffffffff": 1<<64 - 1} {
		if got, ok := ParseSeqHash(key); !ok || got != want {
			t.Errorf("%q: %d %v, want %d", key, got, ok, want)
		}
	}
	for _, key := range []string{"", "0x", "-1", "+1", " 1", "1 ", "18446744073709551616", "0x10000000000000000", "0x-1", "abc", "0b1", "1e3"} {
		if v, ok := ParseSeqHash(key); ok {
			t.Errorf("%q parsed as %d", key, v)
		}
	}
}

// FuzzParseSeqHash: a key parses exactly when it is the decimal or 0x-hex
// form of the value it parses to (leading zeros allowed).
func FuzzParseSeqHash(f *testing.F) {
	for _, s := range []string{"0", "31", "0x1f", "-1", "0x", "18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		v, ok := ParseSeqHash(key)
		if !ok {
			return
		}
		var digits string
		base := 10
		if len(key) > 2 && (key[:2] == "0x" || key[:2] == "0X") {
			digits, base = key[2:], 16
		} else {
			digits = key
		}
		if strings.TrimLeft(strings.ToLower(digits), "0") != strings.TrimLeft(strconv.FormatUint(v, base), "0") {
			t.Fatalf("%q parsed as %d", key, v)
		}
	})
}
