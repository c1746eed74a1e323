package store_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
)

// TestLateRemoverZeroKeepsNewObject: a remover's zeroing of the removed
// object's header is late (its process is slow): meanwhile the node has
// zeroed the header itself, reported it, and a new put of the same size
// fits exactly where the removed object was. The remover's write must not
// destroy the new object's header: after a master restart the new object
// is re-reported by the node and reads back.
func TestLateRemoverZeroKeepsNewObject(t *testing.T) {
	c := newCluster(t, master.Config{Durable: true}, 1, 4<<20)
	cl, remover := c.client(nil), c.client(nil)
	ctx := ctxT(t)
	const size = 100 << 10 // above the client's put-slot sizes: every put asks the master for space
	if err := cl.Put(ctx, "a", value("a", size)); err != nil {
		t.Fatal(err)
	}
	if err := cl.Put(ctx, "filler", value("filler", 3*size)); err != nil {
		t.Fatal(err)
	}
	info, err := c.master.Core().GetReplicaList("a")
	if err != nil {
		t.Fatal(err)
	}
	aHeader := info.Replicas[0].Addr - info.Replicas[0].HeaderLen

	named, release := make(chan []uint64, 1), make(chan struct{})
	store.SetBeforeZero(remover, func(addrs []uint64) {
		named <- addrs
		<-release
	})
	removed := make(chan error, 1)
	go func() { removed <- remover.Remove(ctx, "a", true) }() // force: the lookup above leased it
	var addrs []uint64
	select {
	case addrs = <-named:
	case err := <-removed:
		t.Fatalf("remove returned without zeroing a header: %v", err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if len(addrs) != 1 || addrs[0] != aHeader {
		close(release)
		t.Fatalf("remove named headers %x, want [%x]", addrs, aHeader)
	}
	// The node zeroes the tombstone from its ping answers and reports it.
	waitfor.Cond(t, 10*time.Second, "the node to zero the removed header", func() bool {
		return len(c.master.Core().Tombstones()) == 0
	})
	// A put of the same size now: where the removed object was, if the
	// master handed its space out again.
	if err := cl.Put(ctx, "b", value("b", size)); err != nil {
		close(release)
		t.Fatal(err)
	}
	binfo, err := c.master.Core().GetReplicaList("b")
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	bHeader := binfo.Replicas[0].Addr - binfo.Replicas[0].HeaderLen
	close(release)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	t.Logf("removed header at %#x, new object's header at %#x", aHeader, bHeader)

	c.restartMaster()
	waitfor.Cond(t, 10*time.Second, "the node to remount", func() bool {
		return c.master.Core().Stats().Objects == 2
	})
	for _, k := range []string{"b", "filler"} {
		got, err := cl.Get(ctx, k)
		if err != nil || !bytes.Equal(got, value(k, len(got))) || (k == "b" && len(got) != size) {
			t.Fatalf("get %s after restart: %v", k, err)
		}
	}
	if _, err := cl.Get(ctx, "a"); err == nil {
		t.Fatal("removed key a came back after the restart")
	}
}
