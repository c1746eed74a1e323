package master

import (
	"context"
	"log/slog"
	"slices"
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
func TestLogsNodeDroppedAndUnmounted(t *testing.T) {
	h := &capture{}
	cfg := DefaultConfig()
	cfg.ClientTTL = 3 * time.Second
	cfg.Logger = slog.New(h)
	m, clk := newTestMaster(t, cfg, map[string]uint64{"a": 1 << 20, "b": 1 << 20, "c": 1 << 20})
	mustPut(t, m, "k", 100, ReplicateConfig{Replicas: 3})
	for _, c := range []string{"client-b", "client-c"} {
		m.Ping(c)
	}
	clk.Advance(2 * time.Second)
	for _, c := range []string{"client-b", "client-c"} {
		m.Ping(c)
	}
	clk.Advance(2 * time.Second) // client-a silent 4s > 3s
	m.Tick()
	attrs, ok := h.find("master: client dropped (silent past its TTL); its segments are unmounted and their replicas gone")
	if !ok {
		t.Fatalf("no INFO record of the drop: %v", h.messages())
	}
	if attrs["client"].String() != "client-a" || attrs["replicas"].Int64() != 1 || attrs["client_ttl"].Duration() != 3*time.Second {
		t.Fatalf("drop record %v", attrs)
	}
	if segs, _ := attrs["segments"].Any().([]string); !slices.Equal(segs, []string{"a"}) {
		t.Fatalf("segments %v", attrs["segments"])
	}
	if err := m.UnmountSegment("client-b", "b"); err != nil {
		t.Fatal(err)
	}
	if attrs, ok := h.find("master: segment unmounted"); !ok || attrs["segment"].String() != "b" || attrs["replicas"].Int64() != 1 {
		t.Fatalf("unmount record %v (%v)", attrs, h.messages())
	}
	if err := m.GracefulUnmount("client-c", "c", time.Second); err != nil {
		t.Fatal(err)
	}
	m.Tick()
	if attrs, ok := h.find("master: segment unmounted (graceful)"); !ok || attrs["segment"].String() != "c" {
		t.Fatalf("graceful unmount record %v (%v)", attrs, h.messages())
	}
}
