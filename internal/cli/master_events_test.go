package cli

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/transfer"
)

// eventLog is a kvevents.Sink that keeps what it was given.
type eventLog struct {
	mu     sync.Mutex
	events []kvevents.Event
}

func (l *eventLog) Apply(_ string, b kvevents.Batch) {
	l.mu.Lock()
	l.events = append(l.events, b.Events...)
	l.mu.Unlock()
}
func (l *eventLog) Clear(string) {}

// seen reports whether an event of the given kind names key in medium.
func (l *eventLog) seen(stored bool, key, medium string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		switch e := e.(type) {
		case kvevents.BlockStored:
			if stored && e.Medium == medium && len(e.BlockHashes) == 1 && string(e.BlockHashes[0].Bytes) == key {
				return true
			}
		case kvevents.BlockRemoved:
			if !stored && e.Medium == medium && len(e.BlockHashes) == 1 && string(e.BlockHashes[0].Bytes) == key {
				return true
			}
		}
	}
	return false
}

// TestMasterKVEvents: `mooncake master --kv-events-endpoint` publishes the
// pool's objects in vLLM's KV event format: a put is a BlockStored in CPU,
// a remove a BlockRemoved, read by a ZMQ subscriber as a router would.
func TestMasterKVEvents(t *testing.T) {
	line, _ := startCmd(t, "master", "--host", "127.0.0.1", "--port", "0", "--http-port", "-1",
		"--kv-events-endpoint", "tcp://127.0.0.1:0", "--kv-events-replay-endpoint", "tcp://127.0.0.1:0")
	m := regexp.MustCompile(`grpc=(\S+) .*kv_events=(\S+) kv_events_replay=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("listening line %q", line)
	}
	log := &eventLog{}
	sub, err := kvevents.NewSubscriber(kvevents.SubscriberConfig{Instance: "store", Endpoint: m[2], ReplayEndpoint: m[3], Sink: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	subDone := make(chan error, 1)
	subCtx, stopSub := context.WithCancel(context.Background())
	go func() { subDone <- sub.Run(subCtx) }()
	t.Cleanup(func() { stopSub(); <-subDone })

	node, err := storenode.Start(ctx, storenode.Config{Master: m[1], SegmentSize: 8 << 20, Engine: transfer.Config{Transport: "tcp"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	cl := newStormClient(t, m[1])
	// The subscriber may join after the first batches: replay fills the
	// gap once it sees a later sequence number, so keep putting until the
	// first key's event arrives.
	if err := cl.Put(ctx, "events/a", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	ticks := 0
	waitfor.Cond(t, 10*time.Second, "BlockStored of events/a", func() bool {
		if !log.seen(true, "events/a", "CPU") {
			ticks++
			_ = cl.Put(ctx, fmt.Sprint("events/tick", ticks), []byte("x"))
			return false
		}
		return true
	})
	if err := cl.Remove(ctx, "events/a", false); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 10*time.Second, "BlockRemoved of events/a", func() bool { return log.seen(false, "events/a", "CPU") })
}

// TestMasterMooncakeKVEvents: with Mooncake's flags (--enable_kv_events,
// --kv_events_bind_endpoint, --kv_events_backend_id) the master publishes
// its objects as Mooncake's master does: an empty topic frame, an 8-byte
// sequence number, [timestamp, [event maps], 0] with event_type,
// tenant_id, backend_id, medium "cpu", seq_hashes parsed from a hash key,
// object_key and the legacy aliases, read by a plain ZMQ subscriber.
func TestMasterMooncakeKVEvents(t *testing.T) {
	line, _ := startCmd(t, "master", "--host", "127.0.0.1", "--port", "0", "--http-port", "-1",
		"--enable_kv_events", "--kv_events_bind_endpoint=tcp://127.0.0.1:0", "--kv_events_backend_id=pool-1")
	m := regexp.MustCompile(`grpc=(\S+) .*kv_events=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("listening line %q", line)
	}
	ctx := t.Context()
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { sub.Close() })
	if err := sub.Dial(m[2]); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	msgs := make(chan zmq4.Msg, 64)
	go func() {
		for {
			msg, err := sub.Recv()
			if err != nil {
				close(msgs)
				return
			}
			msgs <- msg
		}
	}()
	node, err := storenode.Start(ctx, storenode.Config{Master: m[1], SegmentSize: 8 << 20, Engine: transfer.Config{Transport: "tcp"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	cl := newStormClient(t, m[1])
	// The subscriber may join after the first batches (no replay here):
	// put keys until one's event arrives.
	var ev map[string]any
	var key string
	for i := 0; ev == nil; i++ {
		key = fmt.Sprintf("0x%x", 0x1f00+i)
		if err := cl.Put(ctx, key, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		select {
		case msg, ok := <-msgs:
			if !ok {
				t.Fatal("subscriber closed")
			}
			if len(msg.Frames) != 3 || len(msg.Frames[0]) != 0 || len(msg.Frames[1]) != 8 {
				t.Fatalf("frames %d: topic %q, sequence of %d bytes", len(msg.Frames), msg.Frames[0], len(msg.Frames[1]))
			}
			var batch []any
			if err := msgpack.Unmarshal(msg.Frames[2], &batch); err != nil || len(batch) != 3 {
				t.Fatalf("batch %v: %v", batch, err)
			}
			if ts := fmt.Sprintf("%T", batch[0]); !strings.Contains(ts, "int") || fmt.Sprint(batch[2]) != "0" {
				t.Fatalf("batch timestamp of type %s (want integer milliseconds), dp rank %v", ts, batch[2])
			}
			evs, _ := batch[1].([]any)
			if len(evs) != 1 {
				t.Fatalf("events %v", batch[1])
			}
			ev, _ = evs[0].(map[string]any)
			key = fmt.Sprint(ev["object_key"])
		case <-time.After(100 * time.Millisecond):
		}
		if i > 100 {
			t.Fatal("no event arrived")
		}
	}
	h, _ := kvevents.ParseSeqHash(key)
	want := map[string]any{"event_type": "stored", "type": "BlockStored", "tenant_id": "default", "backend_id": "pool-1",
		"medium": "cpu", "object_key": key, "model_name": nil, "parent_hash": nil, "token_ids": nil, "parent_block_hash": nil}
	for k, v := range want {
		if got, ok := ev[k]; !ok || fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, k := range []string{"seq_hashes", "block_hashes"} {
		if hs, _ := ev[k].([]any); len(hs) != 1 || fmt.Sprint(hs[0]) != fmt.Sprint(h) {
			t.Errorf("%s = %v, want [%d]", k, ev[k], h)
		}
	}
	if fmt.Sprint(ev["base_block_idx"]) != "0" || ev["event_id"] == nil || ev["timestamp"] == nil {
		t.Errorf("event %v", ev)
	}
}
