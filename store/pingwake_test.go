package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestRemountWhenMasterIsBack: a node whose ping interval is an hour
// still remounts on a restarted master, and its objects come back: its
// connection coming back wakes its ping (pingwake.go), which the new master
// answers with NEED_REMOUNT. Without the wake the next ping would come an
// hour later.
func TestRemountWhenMasterIsBack(t *testing.T) {
	c := newCluster(t, master.Config{Durable: true}, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := storenode.Start(ctx, storenode.Config{Master: c.master.Addr(), SegmentSize: 4 << 20, Engine: transfer.Config{},
		PingInterval: time.Hour, UnmountGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cl := c.client(nil)
	for i := range 20 {
		if err := cl.Put(ctxT(t), "wake/"+string(rune('a'+i)), value("v", 1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	c.restartMaster()
	// The node counts a remount when its session ended, after the master
	// took the objects: wait for both.
	waitfor.Cond(t, 10*time.Second, "the node to remount on the new master", func() bool {
		return len(c.master.Core().Segments()) == 1 && c.master.Core().Stats().Objects == 20 && n.Client().Remounts() >= 1
	})
	if got := n.Client().Remounts(); got != 1 {
		t.Fatalf("%d remounts, want 1", got)
	}
	for i := range 20 {
		k := "wake/" + string(rune('a'+i))
		if v, err := cl.Get(ctxT(t), k); err != nil || string(v) != string(value("v", 1000+i)) {
			t.Fatalf("get %s after the restart: %d bytes, %v", k, len(v), err)
		}
	}
}
