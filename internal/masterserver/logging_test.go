package masterserver

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/logtest"
)

// TestServerLogsShutdown: the master process logs at INFO when it stops.
func TestServerLogsShutdown(t *testing.T) {
	h := &logtest.Recorder{}
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
	if attrs, ok := h.Find(slog.LevelInfo, "master stopped"); !ok || attrs["segments"].Int64() != 0 {
		t.Fatalf("no shutdown record: %v", h.Messages())
	}
}
