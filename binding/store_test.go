package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

func TestStoreCodes(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int64
	}{
		{"not found", fmt.Errorf("store: get: %w", store.ErrNotFound), codeObjectNotFound},
		{"exists", store.ErrExists, codeObjectExists},
		{"has lease", store.ErrHasLease, codeObjectHasLease},
		{"lease expired", store.ErrLeaseExpired, codeLeaseExpired},
		{"no space", store.ErrNoSpace, codeNoHandle},
		{"buffer too small", store.ErrBufferTooSmall, codeInvalidParams},
		{"transfer", fmt.Errorf("x: %w", store.ErrTransfer), codeTransferFail},
		{"corrupt", store.ErrCorrupt, codeTransferFail},
		{"remote code kept", fmt.Errorf("put: %w", &store.RemoteError{Code: -601, Message: "too large"}), codeInvalidParams},
		{"remote unknown code", &store.RemoteError{Code: -602, Message: "not owner"}, -602},
		{"rpc unavailable", fmt.Errorf("rpc: %w", status.Error(codes.Unavailable, "down")), codeRPCFail},
		{"rpc deadline", fmt.Errorf("rpc: %w", status.Error(codes.DeadlineExceeded, "slow")), codeRPCTimeout},
		{"segment", transfer.ErrUnknownSegment, codeSegmentNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := codeOf(tc.err); got != tc.want {
				t.Fatalf("codeOf(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

func TestPutOptions(t *testing.T) {
	tests := []struct {
		in      string
		want    store.PutOptions
		wantErr bool
	}{
		{"", store.PutOptions{}, false},
		{`{"replica_num":2,"soft_pin":true,"preferred_segments":["a","b"]}`,
			store.PutOptions{Replicas: 2, SoftPin: true, PreferredSegments: []string{"a", "b"}}, false},
		{`{"replica_num":1,"with_hard_pin":true}`, store.PutOptions{Replicas: 1, HardPin: true}, false},
		{`{"replica_num":-1}`, store.PutOptions{}, true},
		{`{"replica_num":1000}`, store.PutOptions{}, true},
		{`{"replica_num":"x"}`, store.PutOptions{}, true},
		{`not json`, store.PutOptions{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := putOptions(tc.in)
			if tc.wantErr {
				if codeOf(err) != codeInvalidParams {
					t.Fatalf("want invalid params, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestStoreInProcess runs a master, a storage node and the binding's store
// layer in this process over the in-process transport (TCP is covered by
// python/tests with real processes).
func TestStoreInProcess(t *testing.T) {
	s := inProcessStore(t)

	v := bytes.Repeat([]byte("mooncake"), 1000)
	if err := s.put("k1", v, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.put("k1", []byte("other"), store.PutOptions{}); err != nil {
		t.Fatalf("put of an existing key must succeed (Mooncake semantics): %v", err)
	}
	got, err := s.get("k1")
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get = %d bytes, %v", len(got), err)
	}
	if n, err := s.size("k1"); err != nil || n != int64(len(v)) {
		t.Fatalf("size = %d %v", n, err)
	}
	// get into unregistered memory (copy) and registered memory (direct).
	dst := make([]byte, 10000)
	if n, err := s.getInto("k1", dst); err != nil || n != len(v) || !bytes.Equal(dst[:n], v) {
		t.Fatalf("getInto unregistered = %d %v", n, err)
	}
	// A large unregistered destination is registered for the read (and released after).
	big := bytes.Repeat([]byte{7, 1, 3}, 40000)
	if err := s.put("big", big, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	bdst := make([]byte, 128<<10)
	if n, err := s.getInto("big", bdst); err != nil || n != len(big) || !bytes.Equal(bdst[:n], big) {
		t.Fatalf("getInto large unregistered = %d %v", n, err)
	}
	if err := s.registerBuffer(bdst); err != nil {
		t.Fatalf("destination still registered after getInto: %v", err)
	}
	if err := s.unregisterBuffer(uint64(transfer.AddrOf(bdst))); err != nil {
		t.Fatal(err)
	}
	if err := s.remove("big", true); err != nil {
		t.Fatal(err)
	}
	reg := make([]byte, 1<<16)
	if err := s.registerBuffer(reg); err != nil {
		t.Fatal(err)
	}
	if n, err := s.getInto("k1", reg); err != nil || n != len(v) || !bytes.Equal(reg[:n], v) {
		t.Fatalf("getInto registered = %d %v", n, err)
	}
	copy(reg[32768:], "from registered memory")
	if err := s.put("k2", reg[32768:32768+22], store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.unregisterBuffer(uint64(transfer.AddrOf(reg))); err != nil {
		t.Fatal(err)
	}
	if err := s.unregisterBuffer(uint64(transfer.AddrOf(reg))); codeOf(err) != codeInvalidParams {
		t.Fatalf("second unregister: %v", err)
	}
	if _, err := s.getInto("k1", make([]byte, 10)); codeOf(err) != codeInvalidParams {
		t.Fatalf("small buffer: %v", err)
	}
	if _, err := s.get("missing"); codeOf(err) != codeObjectNotFound {
		t.Fatalf("missing: %v", err)
	}
	if ok, err := s.exist("k2"); !ok || err != nil {
		t.Fatalf("exist k2 = %v %v", ok, err)
	}
	oks, err := s.batchExist([]string{"k1", "nope", "k2"})
	if err != nil || fmt.Sprint(oks) != "[true false true]" {
		t.Fatalf("batchExist = %v %v", oks, err)
	}
	list, err := s.list("k")
	if err != nil || string(list) != `["k1","k2"]` {
		t.Fatalf("list = %s %v", list, err)
	}
	if err := s.remove("k1", false); codeOf(err) != codeObjectHasLease {
		t.Fatalf("remove of a leased key: %v", err)
	}
	// The reason mc_last_error gives names the call once (python/mooncake
	// prefixes it with "remove: "): never "remove: remove:".
	if rc := guard("remove", func() (int64, error) { return 0, s.remove("k1", false) }); rc != codeObjectHasLease {
		t.Fatalf("guarded remove: %d", rc)
	}
	if msg := lastError(); strings.Count(msg, "remove") != 1 || strings.HasPrefix(msg, "remove:") || !strings.Contains(msg, `"k1"`) {
		t.Fatalf("last error %q", msg)
	}
	if err := s.remove("k1", true); err != nil {
		t.Fatal(err)
	}
	if n, err := s.removeAll(true); err != nil || n != 1 {
		t.Fatalf("removeAll = %d %v", n, err)
	}
	if err := s.health(); err != nil {
		t.Fatal(err)
	}
	if err := s.put("", v, store.PutOptions{}); codeOf(err) != codeInvalidParams {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := storeByHandle(12345); !errors.Is(err, errBadHandle) {
		t.Fatalf("bad handle: %v", err)
	}
}

func TestStoreEngineArgs(t *testing.T) {
	tests := []struct {
		name          string
		a             storeArgs
		wantTransport string
		wantWarns     int
		wantErr       bool
	}{
		{"p2p default protocol is auto", storeArgs{host: "127.0.0.1", metadata: "P2PHANDSHAKE"}, transfer.TransportAuto, 0, false},
		{"empty metadata", storeArgs{host: "127.0.0.1", protocol: "tcp"}, transfer.TransportTCP, 0, false},
		{"http metadata ignored", storeArgs{host: "127.0.0.1", metadata: "http://127.0.0.1:8080/metadata", protocol: "tcp"}, transfer.TransportTCP, 1, false},
		{"etcd metadata ignored", storeArgs{host: "127.0.0.1", metadata: "127.0.0.1:2379"}, transfer.TransportAuto, 1, false},
		{"redis metadata ignored", storeArgs{host: "127.0.0.1", metadata: "redis://127.0.0.1:6379", protocol: "rdma"}, transfer.TransportTCP, 2, false},
		{"bad protocol", storeArgs{host: "127.0.0.1", protocol: "pigeon"}, "", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, warns, err := storeEngineArgs(tc.a)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want error, got %+v", cfg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Metadata != transfer.MetadataP2P || cfg.Transport != tc.wantTransport || len(warns) != tc.wantWarns {
				t.Fatalf("metadata %q transport %q warnings %q", cfg.Metadata, cfg.Transport, warns)
			}
		})
	}
}

// TestPutOptionsFields: every field of putConfigJSON reaches store.PutOptions.
func TestPutOptionsFields(t *testing.T) {
	o, err := putOptions("")
	if err != nil || o.Replicas != 0 || o.Upsert || o.SoftPin {
		t.Fatalf("empty config: %+v, %v", o, err)
	}
	o, err = putOptions(`{"replica_num":2,"soft_pin":true,"soft_pin_ttl_ms":1500,"with_hard_pin":true,` +
		`"preferred_segments":["a:1"],"prefer_alloc_in_same_node":true,"upsert":true}`)
	if err != nil {
		t.Fatal(err)
	}
	if o.Replicas != 2 || !o.SoftPin || o.SoftPinTTL != 1500*time.Millisecond || !o.HardPin || !o.PreferLocal ||
		!o.Upsert || len(o.PreferredSegments) != 1 || o.PreferredSegments[0] != "a:1" {
		t.Fatalf("parsed %+v", o)
	}
	for _, bad := range []string{`{`, `{"replica_num":-1}`, `{"replica_num":65}`, `{"soft_pin_ttl_ms":-5}`} {
		if _, err := putOptions(bad); !errors.Is(err, errInvalidParams) {
			t.Errorf("%s: got %v, want errInvalidParams", bad, err)
		}
	}
}

// TestStorePutOptionsInProcess checks that put passes upsert, soft pin (with its
// TTL) and hard pin through to the store, and the batch remove, stat and
// hostname calls, against an in-process master and storage node.
func TestStorePutOptionsInProcess(t *testing.T) {
	s := inProcessStore(t)

	if h := s.hostname(); !strings.HasPrefix(h, "127.0.0.1:") {
		t.Fatalf("hostname %q, want 127.0.0.1:<port>", h)
	}
	o, err := putOptions(`{"replica_num":1,"soft_pin":true,"soft_pin_ttl_ms":60000}`)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.put("pinned", []byte("v1"), o); err != nil {
		t.Fatal(err)
	}
	info, err := s.c.Stat(t.Context(), "pinned")
	if err != nil {
		t.Fatal(err)
	}
	if until := info.SoftPinUntil; until.Before(start.Add(50*time.Second)) || until.After(time.Now().Add(61*time.Second)) {
		t.Fatalf("soft pin until %v, want about a minute from %v", until, start)
	}
	if err := s.put("pinned", []byte("v2"), store.PutOptions{}); err != nil {
		t.Fatalf("plain put of an existing key: %v", err)
	}
	if got, _ := s.get("pinned"); string(got) != "v1" {
		t.Fatalf("plain put replaced the value: %q", got)
	}
	// Upsert (no get before it, so no read lease is held) replaces the value and pins it.
	if err := s.put("hp", []byte("old"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	o, _ = putOptions(`{"with_hard_pin":true,"upsert":true}`)
	if err := s.put("hp", []byte("new"), o); err != nil {
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
