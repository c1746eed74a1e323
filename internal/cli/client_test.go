package cli

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/dummyclient"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestRunClientServesDummies runs `mooncake client`'s core against a master:
// a dummy attaches, puts a value from its pool onto the client's segment and
// reads it back, and the client stops when its context ends.
func TestRunClientServesDummies(t *testing.T) {
	m, err := master.Start(master.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Close() }()
	log := slog.New(slog.DiscardHandler)
	addr := "cli-test/" + t.Name()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runClient(ctx, clientConfig{master: m.Addr(), addr: addr, segment: 8 << 20, buffer: 4 << 20,
			engine: transfer.Config{LocalHostname: "127.0.0.1", Transport: transfer.TransportTCP, Logger: log}, log: log},
			func(segment string) { ready <- segment })
	}()
	var segment string
	select {
	case segment = <-ready:
	case err := <-done:
		t.Fatalf("runClient ended before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("runClient not ready")
	}
	d, err := dummyclient.Dial(t.Context(), addr, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if d.SegmentName() != segment {
		t.Fatalf("dummy sees %q, client mounted %q", d.SegmentName(), segment)
	}
	src, dst := d.Alloc(64<<10), d.Alloc(64<<10)
	for i := range src {
		src[i] = byte(i)
	}
	if err := d.PutFrom(t.Context(), "k", src, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.GetInto(t.Context(), "k", dst); err != nil || n != len(src) || dst[1000] != src[1000] {
		t.Fatalf("GetInto %d %v", n, err)
	}
	_ = d.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runClient: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runClient did not stop")
	}
}
