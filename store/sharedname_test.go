package store_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
)

// TestSharedSegmentName: two clients mount segments under one name, as
// Mooncake's test_batch_replica_clear does (two stores given one
// local_hostname); a put of two replicas lands one under each name, a
// replica clear by name leaves the other readable, and closing one of the
// clients sharing the name does not wait for the other's segment.
func TestSharedSegmentName(t *testing.T) {
	c := newCluster(t, master.Config{LeaseTTL: 300 * time.Millisecond}, 0, 0)
	ctx := ctxT(t)
	shared := func(cfg *store.Config) {
		cfg.SegmentSize, cfg.SegmentName, cfg.UnmountGrace = 4<<20, "host:1", 10*time.Second
	}
	a, b := c.client(shared), c.client(shared)
	other := c.client(func(cfg *store.Config) { cfg.SegmentSize = 4 << 20 })
	if a.SegmentName() != "host:1" || b.SegmentName() != "host:1" {
		t.Fatalf("names %q, %q", a.SegmentName(), b.SegmentName())
	}
	val := value("k", 10_000)
	if err := a.PutWith(ctx, "k", val, store.PutOptions{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	info, err := other.Stat(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range info.Replicas {
		names = append(names, r.Segment)
	}
	slices.Sort(names)
	want := []string{"host:1", other.SegmentName()}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("replicas on %v, want one under each name %v", names, want)
	}
	// The put's lease keeps a replica clear away: wait it out.
	var cleared []string
	waitfor.Cond(t, 15*time.Second, "replica clear under host:1", func() bool {
		if cleared, err = a.BatchReplicaClear(ctx, []string{"k"}, "host:1"); err != nil {
			t.Fatal(err)
		}
		return len(cleared) > 0
	})
	if !slices.Equal(cleared, []string{"k"}) {
		t.Fatalf("cleared %v", cleared)
	}
	if got, err := b.Get(ctx, "k"); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get after the clear: %d bytes, %v", len(got), err)
	}
	if info, err := other.Stat(ctx, "k"); err != nil || len(info.Replicas) != 1 || info.Replicas[0].Segment != other.SegmentName() {
		t.Fatalf("after the clear: %+v %v", info, err)
	}
	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("close took %v: it waited on the other client's segment of the name", d)
	}
}
