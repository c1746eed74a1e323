package cli

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

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
