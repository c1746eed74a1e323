package masterserver

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"
)

// capture is a slog.Handler that keeps every record at INFO and above.
type capture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *capture) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

// find returns the attributes of the first INFO record whose message is msg.
func (c *capture) find(msg string) (map[string]slog.Value, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.recs {
		if r.Message != msg || r.Level != slog.LevelInfo {
			continue
		}
		attrs := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
		return attrs, true
	}
	return nil, false
}

func (c *capture) messages() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.recs {
		out = append(out, r.Message)
	}
	return out
}

// TestLogsNodeDroppedAndUnmounted: a client silent past its TTL is logged
// at INFO with its segments and the replicas lost; a graceful unmount and a
// plain unmount are logged too.
// TestServerLogsShutdown: the master process logs at INFO when it stops.
func TestServerLogsShutdown(t *testing.T) {
	h := &capture{}
	cfg := DefaultServerConfig()
	cfg.Addr, cfg.HTTPAddr, cfg.Logger = "127.0.0.1:0", "", slog.New(h)
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, gl, nil) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if attrs, ok := h.find("master stopped"); !ok || attrs["segments"].Int64() != 0 {
		t.Fatalf("no shutdown record: %v", h.messages())
	}
}
