package storenode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/syncbuf"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"go.uber.org/goleak"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"ok", Config{Master: "127.0.0.1:1", SegmentSize: 1 << 20}, true},
		{"no master", Config{SegmentSize: 1 << 20}, false},
		{"tiny segment", Config{Master: "127.0.0.1:1", SegmentSize: 100}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestMountRemountUnmount: the node mounts, remounts on a fresh master
// core after a restart, and unmounts on Close; no goroutine outlives it.
func TestMountRemountUnmount(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv, err := masterserver.Start(masterserver.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logs := &syncbuf.Buffer{}
	n, err := Start(ctx, Config{Master: srv.Addr(), SegmentSize: 1 << 20, PingInterval: 10 * time.Millisecond,
		RPCTimeout: 300 * time.Millisecond, UnmountGrace: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpCtx, stopHTTP := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- n.Serve(httpCtx, ln) }()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		resp, err := hc.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitHealth := func(want int) {
		waitfor.Cond(t, 10*time.Second, fmt.Sprintf("/health to answer %d", want), func() bool {
			code, _ := get("/health")
			return code == want
		})
	}
	waitHealth(200)
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, fmt.Sprintf("mooncake_storenode_segment_bytes{segment=%q} 1048576", n.Name())) {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	si, err := srv.Core().Segment(n.Name())
	if err != nil || si.Capacity != 1<<20 || si.Endpoint != n.Name() {
		t.Fatalf("segment after start: %+v %v", si, err)
	}
	addr := srv.Addr()
	srv.Close()
	waitHealth(503) // the master is gone: pings fail
	deadline := time.Now().Add(5 * time.Second)
	// The port is being released: retry with a deadline.
	if !waitfor.Within(time.Until(deadline), func() bool {
		srv, err = masterserver.Start(masterserver.ServerConfig{Addr: addr, TickInterval: 5 * time.Millisecond})
		return err == nil
	}) {
		t.Fatal(err)
	}
	defer srv.Close()
	// The segment is known from the remount's first call; the remount is
	// done when the node logs it.
	remounted := func() bool {
		_, err := srv.Core().Segment(n.Name())
		return err == nil && strings.Contains(logs.String(), `msg="store: remounted after NEED_REMOUNT"`)
	}
	waitfor.Cond(t, time.Until(deadline.Add(5*time.Second)), "node to remount on the restarted master", remounted)
	waitHealth(200)
	if _, body := get("/metrics"); !strings.Contains(body, "mooncake_storenode_remounts_total") || !strings.Contains(body, "mooncake_storenode_remount_pending{") {
		t.Fatalf("/metrics after remount: %s", body)
	}
	stopHTTP()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Core().Segment(n.Name()); !errors.Is(err, master.ErrSegmentNotFound) {
		t.Fatalf("segment after close: %v", err)
	}
	// An operator sees the remount and the shutdown at INFO.
	for _, want := range []string{`level=INFO msg="store: remounted after NEED_REMOUNT"`, `level=INFO msg="storage node stopping: unmounting"`,
		`level=INFO msg="storage node stopped" segment=` + n.Name()} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	srv.Close()
	// grpc's reconnect goroutine may still be unwinding after ClientConn.Close.
	goleak.VerifyNone(t, ignore, goleak.IgnoreTopFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"))
}
