package kvevents

import (
	"context"
	"encoding/binary"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, IgnoreZMQLeak()...) }

func sample() Batch {
	dp := 0
	p := IntHash(7)
	lora := 3
	return Batch{TS: 1.5, DPRank: &dp, Events: []Event{
		BlockStored{BlockHashes: []Hash{IntHash(1), BytesHash([]byte{9, 8, 7})}, ParentBlockHash: &p, TokenIDs: []int{1, 2, 3, 4}, BlockSize: 2, LoraID: &lora, Medium: MediumGPU},
		BlockRemoved{BlockHashes: []Hash{IntHash(1)}, Medium: MediumGPU},
		AllBlocksCleared{},
	}}
}

func TestRoundTripBothEncodings(t *testing.T) {
	for _, m := range []bool{false, true} {
		b, err := Encode(sample(), m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, sample()) {
			t.Fatalf("map %v:\n got %#v\nwant %#v", m, got, sample())
		}
	}
}

// Payloads shaped as vLLM's msgspec writes them, built by hand.
func TestDecodeVLLMShapes(t *testing.T) {
	arr, _ := msgpack.Marshal([]any{2.0, []any{
		[]any{"BlockStored", []any{int64(-5), uint64(1 << 63)}, nil, []any{1, 2}, 1, nil}, // older: no medium
		[]any{"BlockRemoved", []any{int64(-5)}},
		[]any{"SomethingNew", 1},
	}})
	b, err := Decode(arr)
	if err != nil || len(b.Events) != 2 || b.DPRank != nil {
		t.Fatalf("%#v %v", b, err)
	}
	s := b.Events[0].(BlockStored)
	if s.BlockHashes[0].Uint64() != uint64(1<<64-5) || s.BlockHashes[1].Int != 1<<63 || s.BlockSize != 1 {
		t.Fatalf("%#v", s)
	}
	mp, _ := msgpack.Marshal(map[string]any{"ts": 3, "data_parallel_rank": 1, "events": []any{
		map[string]any{"type": "BlockStored", "block_hashes": []any{[]byte("0123456789")}, "parent_block_hash": nil,
			"token_ids": []any{5}, "block_size": 1, "lora_id": nil, "medium": "GPU", "lora_name": nil, "extra_keys": nil, "group_idx": 0},
		map[string]any{"type": "AllBlocksCleared"},
	}})
	b, err = Decode(mp)
	if err != nil || len(b.Events) != 2 || *b.DPRank != 1 || b.TS != 3 {
		t.Fatalf("%#v %v", b, err)
	}
	if h := b.Events[0].(BlockStored).BlockHashes[0]; h.Uint64() != binary.BigEndian.Uint64([]byte("23456789")) {
		t.Fatalf("bytes hash %x", h.Uint64())
	}
	for _, bad := range [][]byte{nil, {0xc1}, mustPack(1), mustPack([]any{"x"}), mustPack(map[string]any{"ts": "a"}),
		mustPack([]any{1.0, []any{[]any{"BlockStored", []any{"str"}, nil, []any{}, 1}}}),
		mustPack([]any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{1, 2, 3}, 2}}})} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("accepted %x", bad)
		}
	}
}

func mustPack(v any) []byte { b, _ := msgpack.Marshal(v); return b }

func FuzzDecode(f *testing.F) {
	for _, m := range []bool{false, true} {
		b, _ := Encode(sample(), m)
		f.Add(b)
	}
	f.Add([]byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0xc0})
	if b, err := Encode(extraKeysBatch(), true); err == nil {
		f.Add(b)
	}
	for _, m := range []bool{false, true} {
		b, _ := Encode(standardSample(), m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Decode(b)
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to the same batch.
		again, err := Encode(got, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
	})
}

// The index names blocks by our identity, whatever the publisher's hashes.
func TestIndexRecomputesIdentity(t *testing.T) {
	x := NewIndex()
	toks := []int{256, 1, 2, 3, 4, 5, 6, 7}
	want := PromptBlocks("", 2, toks)
	// vLLM-style int hashes, two events chained by parent.
	x.Apply("a", Batch{Events: []Event{BlockStored{BlockHashes: []Hash{IntHash(10), IntHash(11)}, TokenIDs: toks[:4], BlockSize: 2}}})
	p := IntHash(11)
	x.Apply("a", Batch{Events: []Event{BlockStored{BlockHashes: []Hash{IntHash(12)}, ParentBlockHash: &p, TokenIDs: toks[4:6], BlockSize: 2}}})
	if n := x.Matched("a", want); n != 3 {
		t.Fatalf("matched %d, want 3", n)
	}
	// An unknown parent names nothing.
	q := IntHash(99)
	x.Apply("b", Batch{Events: []Event{BlockStored{BlockHashes: []Hash{IntHash(1)}, ParentBlockHash: &q, TokenIDs: toks[:2], BlockSize: 2}}})
	if x.Blocks("b") != 0 {
		t.Fatal("block with unknown parent indexed")
	}
	x.Apply("a", Batch{Events: []Event{BlockRemoved{BlockHashes: []Hash{IntHash(11)}}}})
	if n := x.Matched("a", want); n != 1 {
		t.Fatalf("after removal matched %d, want 1", n)
	}
	x.Apply("a", Batch{Events: []Event{AllBlocksCleared{}}})
	if x.Blocks("a") != 0 {
		t.Fatal("cleared instance still holds blocks")
	}
	// Our engines' own hashes are our identity already.
	hs := kvcache.HashBlocks("", 2, toks)
	x.Apply("c", Batch{Events: []Event{BlockStored{BlockHashes: []Hash{BytesHash(hs[0][:]), BytesHash(hs[1][:])}, TokenIDs: toks[:4], BlockSize: 2}}})
	if n := x.Matched("c", want); n != 2 {
		t.Fatalf("matched %d, want 2", n)
	}
}

type recSink struct {
	mu      sync.Mutex
	batches []Batch
	cleared int
}

func (r *recSink) Apply(_ string, b Batch) {
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
}
func (r *recSink) Clear(string) { r.mu.Lock(); r.cleared++; r.mu.Unlock() }
func (r *recSink) n() int       { r.mu.Lock(); defer r.mu.Unlock(); return len(r.batches) }

func frame(seq uint64, b Batch) [][]byte {
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	p, _ := Encode(b, false)
	return [][]byte{nil, s[:], p}
}

// A Go publisher and subscriber over ZMQ; then a gap recovered by replay,
// a duplicate dropped.
func TestPublisherSubscriberGapReplay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub, err := NewPublisher(Config{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", BlockSize: 2, MapEncoding: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pub.Run(ctx) }()
	<-pub.Ready()
	pubAddr, replAddr := pub.Endpoints()

	live := &recSink{}
	sub, _ := NewSubscriber(SubscriberConfig{Instance: "p0", Endpoint: pubAddr, ReplayEndpoint: replAddr, Sink: live})
	subDone := make(chan error, 1)
	subCtx, subCancel := context.WithCancel(ctx)
	go func() { subDone <- sub.Run(subCtx) }()
	// PUB drops messages until the subscription is through: publish until
	// one arrives (a late joiner replays what it missed).
	hs := kvcache.HashBlocks("", 2, []int{1, 2, 3, 4})
	waitfor.Cond(t, 10*time.Second, "first live batch", func() bool {
		pub.BlockStored(hs[:1], nil, []int{1, 2})
		time.Sleep(20 * time.Millisecond)
		return live.n() > 0
	})
	n := pub.Sent()
	waitfor.Cond(t, 5*time.Second, "every batch", func() bool { return uint64(live.n()) == n })
	subCancel()
	<-subDone

	// Handle by hand: seq n (in order), n+2 (gap: n+1 replayed), n+1 again (dropped).
	pub.BlockStored(hs[1:2], &hs[0], []int{3, 4})
	pub.BlockRemoved(hs[1:2])
	pub.AllBlocksCleared()
	waitfor.Cond(t, 5*time.Second, "published", func() bool { return pub.Sent() == n+3 })
	rec := &recSink{}
	s2, _ := NewSubscriber(SubscriberConfig{Instance: "p0", Endpoint: pubAddr, ReplayEndpoint: replAddr, Sink: rec})
	s2.mu.Lock()
	s2.next, s2.seen = n, true
	s2.mu.Unlock()
	s2.Handle(ctx, frame(n, Batch{Events: []Event{AllBlocksCleared{}}}))
	s2.Handle(ctx, frame(n+2, Batch{Events: []Event{AllBlocksCleared{}}}))
	s2.Handle(ctx, frame(n+1, Batch{}))
	st := s2.Stats()
	if st.Gaps != 1 || st.Replayed != 1 || st.Dropped != 1 || st.Applied != 3 || rec.cleared != 0 {
		t.Fatalf("stats %+v cleared %d", st, rec.cleared)
	}
	if _, ok := rec.batches[1].Events[0].(BlockRemoved); !ok {
		t.Fatalf("replayed batch %#v, want the BlockRemoved", rec.batches[1])
	}
	// A restarted publisher counts from 0 again: followed anew, not dropped.
	s2.Handle(ctx, frame(0, Batch{Events: []Event{AllBlocksCleared{}}}))
	if st := s2.Stats(); st.Restarts != 1 || st.Applied != 4 || rec.cleared != 1 {
		t.Fatalf("after a restart: stats %+v cleared %d", st, rec.cleared)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func IgnoreZMQLeak() []goleak.Option {
	var ignore []goleak.Option
	for _, f := range ZMQLeakFuncs() {
		ignore = append(ignore, goleak.IgnoreAnyFunction(f))
	}
	return ignore
}
