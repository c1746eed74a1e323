package cli

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/dummyclient"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestRunClientServesDummies runs `mooncake client`'s core against a master:
// a dummy attaches, puts a value from its pool onto the client's segment and
// reads it back, and the client stops when its context ends.
func TestRunClientServesDummies(t *testing.T) {
	m, err := masterserver.Start(masterserver.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond})
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

// TestRunClientDiskTier: `mooncake client --root-fs-dir DIR --enable-offload`
// puts a disk tier behind its segment: values its dummies put there that
// the master evicts go to files under DIR and read back through a dummy.
func TestRunClientDiskTier(t *testing.T) {
	if _, err := (&diskFlags{enable: true}).config(); err == nil {
		t.Fatal("--enable-offload without --root-fs-dir accepted")
	}
	if c, err := (&diskFlags{dir: "x"}).config(); c != nil || err != nil {
		t.Fatalf("disk tier without --enable-offload: %v %v", c, err)
	}
	m, err := masterserver.Start(masterserver.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond,
		Core: master.Config{Durable: true, HighWatermark: 0.5, EvictionRatio: 0.2}}) // offload needs durable objects
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Close() }()
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	dcfg, err := (&diskFlags{dir: dir, enable: true, capacity: "64MiB", offloadOnEvict: true, promote: true}).config()
	if err != nil {
		t.Fatal(err)
	}
	addr := "cli-test/" + t.Name()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runClient(ctx, clientConfig{master: m.Addr(), addr: addr, segment: 1 << 20, buffer: 1 << 20,
			engine: transfer.Config{LocalHostname: "127.0.0.1", Transport: transfer.TransportTCP, Logger: log}, log: log, disk: dcfg},
			func(segment string) { ready <- segment })
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("runClient ended before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("runClient not ready")
	}
	d, err := dummyclient.Dial(t.Context(), addr, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 64<<10) }
	keys := []string{}
	// 24 x 64 KiB into a 1 MiB segment: above the watermark; spaced so the
	// watermark eviction (which offloads) runs before the pool is full.
	for i := range 24 {
		k := fmt.Sprint("disk/", i)
		if err := d.PutWith(t.Context(), k, val(i), store.PutOptions{}); err == nil {
			keys = append(keys, k)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var cold string
	waitfor.Cond(t, 20*time.Second, "a key held only on disk", func() bool {
		for _, k := range keys {
			if info, err := d.Stat(t.Context(), k); err == nil && len(info.Replicas) == 0 && len(info.Disk) == 1 {
				cold = k
				return true
			}
		}
		return false
	})
	if files, _ := filepath.Glob(filepath.Join(dir, "*.obj")); len(files) == 0 {
		t.Fatal("no object file under --root-fs-dir")
	}
	var i int
	fmt.Sscanf(cold, "disk/%d", &i)
	if got, err := d.Get(t.Context(), cold); err != nil || !bytes.Equal(got, val(i)) {
		t.Fatalf("get %s from disk: %v", cold, err)
	}
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
