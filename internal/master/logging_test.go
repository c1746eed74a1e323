package master

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/logtest"
)

// TestLogsNodeDroppedAndUnmounted: a client silent past its TTL is logged
// at INFO with its segments and the replicas lost; a graceful unmount and a
// plain unmount are logged too.
func TestLogsNodeDroppedAndUnmounted(t *testing.T) {
	h := &logtest.Recorder{}
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
	attrs, ok := h.Find(slog.LevelInfo, "master: client dropped (silent past its TTL); its segments are unmounted and their replicas gone")
	if !ok {
		t.Fatalf("no INFO record of the drop: %v", h.Messages())
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
	if attrs, ok := h.Find(slog.LevelInfo, "master: segment unmounted"); !ok || attrs["segment"].String() != "b" || attrs["replicas"].Int64() != 1 {
		t.Fatalf("unmount record %v (%v)", attrs, h.Messages())
	}
	if err := m.GracefulUnmount("client-c", "c", time.Second); err != nil {
		t.Fatal(err)
	}
	m.Tick()
	if attrs, ok := h.Find(slog.LevelInfo, "master: segment unmounted (graceful)"); !ok || attrs["segment"].String() != "c" {
		t.Fatalf("graceful unmount record %v (%v)", attrs, h.Messages())
	}
}
