package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/store"
)

func TestPutOptionsEx(t *testing.T) {
	o, err := putOptionsEx("")
	if err != nil || o.Replicas != 0 || o.Upsert || o.SoftPin {
		t.Fatalf("empty config: %+v, %v", o, err)
	}
	o, err = putOptionsEx(`{"replica_num":2,"soft_pin":true,"soft_pin_ttl_ms":1500,"with_hard_pin":true,` +
		`"preferred_segments":["a:1"],"prefer_alloc_in_same_node":true,"upsert":true}`)
	if err != nil {
		t.Fatal(err)
	}
	if o.Replicas != 2 || !o.SoftPin || o.SoftPinTTL != 1500*time.Millisecond || !o.HardPin || !o.PreferLocal ||
		!o.Upsert || len(o.PreferredSegments) != 1 || o.PreferredSegments[0] != "a:1" {
		t.Fatalf("parsed %+v", o)
	}
	for _, bad := range []string{`{`, `{"replica_num":-1}`, `{"replica_num":65}`, `{"soft_pin_ttl_ms":-5}`} {
		if _, err := putOptionsEx(bad); !errors.Is(err, errInvalidParams) {
			t.Errorf("%s: got %v, want errInvalidParams", bad, err)
		}
	}
}

// TestStoreMoreInProcess checks that put_ex passes upsert, soft pin (with its
// TTL) and hard pin through to the store, and the batch remove, stat and
// hostname calls, against an in-process master and storage node.
func TestStoreMoreInProcess(t *testing.T) {
	s := inProcessStore(t)

	if h := s.hostname(); !strings.HasPrefix(h, "127.0.0.1:") {
		t.Fatalf("hostname %q, want 127.0.0.1:<port>", h)
	}
	o, err := putOptionsEx(`{"replica_num":1,"soft_pin":true,"soft_pin_ttl_ms":60000}`)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.putEx("pinned", []byte("v1"), o); err != nil {
		t.Fatal(err)
	}
	info, err := s.c.Stat(t.Context(), "pinned")
	if err != nil {
		t.Fatal(err)
	}
	if until := info.SoftPinUntil; until.Before(start.Add(50*time.Second)) || until.After(time.Now().Add(61*time.Second)) {
		t.Fatalf("soft pin until %v, want about a minute from %v", until, start)
	}
	if err := s.putEx("pinned", []byte("v2"), store.PutOptions{}); err != nil {
		t.Fatalf("plain put of an existing key: %v", err)
	}
	if got, _ := s.get("pinned"); string(got) != "v1" {
		t.Fatalf("plain put replaced the value: %q", got)
	}
	// Upsert (no get before it, so no read lease is held) replaces the value and pins it.
	if err := s.putEx("hp", []byte("old"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	o, _ = putOptionsEx(`{"with_hard_pin":true,"upsert":true}`)
	if err := s.putEx("hp", []byte("new"), o); err != nil {
		t.Fatal(err)
	}
	if info, err = s.c.Stat(t.Context(), "hp"); err != nil || !info.HardPin {
		t.Fatalf("after upsert with hard pin: %+v, %v", info, err)
	}
	if got, _ := s.get("hp"); string(got) != "new" {
		t.Fatalf("upsert did not replace the value: %q", got)
	}
	raw, err := s.stat("pinned")
	if err != nil {
		t.Fatal(err)
	}
	var st statJSON
	if err := json.Unmarshal(raw, &st); err != nil || len(st.Replicas) != 1 || st.Size == 0 {
		t.Fatalf("stat %s: %v", raw, err)
	}
	errs := s.batchRemove([]string{"pinned", "hp", "missing"}, true)
	if len(errs) != 3 || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], store.ErrNotFound) {
		t.Fatalf("batch remove: %v", errs)
	}
}
