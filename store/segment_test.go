package store_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestCallerSegment: a client contributes memory it was given
// (Config.Segment) under its own name (Config.SegmentName) on an engine
// another client also uses (Mooncake's mount_segment: an extra segment of
// one process); values put there land in that memory; CloseWithGrace(0)
// unmounts it at once and leaves the memory to the caller.
func TestCallerSegment(t *testing.T) {
	c := newCluster(t, master.Config{}, 0, 0)
	ctx := ctxT(t)
	eng, err := transfer.Open(ctx, transfer.Config{Transport: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	base, err := store.New(ctx, store.Config{Master: c.master.Addr(), Mover: eng, SegmentSize: 1 << 20, LocalBufferSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	mem := make([]byte, 1<<20)
	extra, err := store.New(ctx, store.Config{Master: c.master.Addr(), Mover: eng, Segment: mem, SegmentName: "extra-1",
		LocalBufferSize: 64 << 10, PingInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if extra.SegmentName() != "extra-1" || base.SegmentName() != eng.Name() {
		t.Fatalf("segment names %q, %q", extra.SegmentName(), base.SegmentName())
	}
	v := value("on-extra", 4096)
	if err := base.PutWith(ctx, "on-extra", v, store.PutOptions{PreferredSegments: []string{"extra-1"}}); err != nil {
		t.Fatal(err)
	}
	info, err := base.Stat(ctx, "on-extra")
	if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Segment != "extra-1" {
		t.Fatalf("stat: %+v %v", info, err)
	}
	if !bytes.Contains(mem, v) {
		t.Fatal("the value is not in the caller's memory")
	}
	got, err := base.Get(ctx, "on-extra")
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get: %v", err)
	}
	start := time.Now()
	if err := extra.CloseWithGrace(0); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("unmount with no grace took %v", d)
	}
	if _, err := base.Get(ctx, "on-extra"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after its segment was unmounted: %v", err)
	}
	if err := base.PutWith(ctx, "after", v, store.PutOptions{PreferredSegments: []string{"extra-1"}}); err != nil {
		t.Fatal(err)
	}
	if info, err := base.Stat(ctx, "after"); err != nil || info.Replicas[0].Segment != eng.Name() {
		t.Fatalf("put after the unmount: %+v %v", info, err)
	}
	// The memory is the caller's again: no longer registered with the engine.
	if err := eng.RegisterBytes(mem, "cpu:0"); err != nil {
		t.Fatalf("memory still registered after Close: %v", err)
	}
}
