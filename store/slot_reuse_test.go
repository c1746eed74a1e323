package store_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// Upserts reuse the replaced versions' space as the client's next slots;
// a key removed while the client's slot still holds its older header
// (the slot is revoked) does not come back after a master restart, and the
// keys kept come back with their newest values.
func TestReusedSlotsRestart(t *testing.T) {
	c := newCluster(t, master.Config{Durable: true}, 1, 16<<20)
	cl := c.client(nil)
	ctx := context.Background()
	val := func(key string, round int) []byte { return value(fmt.Sprintf("%s#%d", key, round), 4096) }
	for round := range 5 {
		for i := range 4 {
			key := fmt.Sprintf("u/%d", i)
			if err := cl.Upsert(ctx, key, val(key, round)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := c.master.Core().Stats().SlotsReused; n < 10 {
		t.Fatalf("%d slots reused after 20 upserts of 4 keys", n)
	}
	// The client's slot holds u/3's round-3 header: removing u/3 revokes it.
	for _, key := range []string{"u/3", "u/0"} {
		if err := cl.Remove(ctx, key, false); err != nil {
			t.Fatal(err)
		}
	}
	c.restartMaster()
	waitfor.Cond(t, 10*time.Second, "the node to remount with the objects", func() bool {
		return c.master.Core().Stats().Objects >= 2
	})
	for i := range 4 {
		key := fmt.Sprintf("u/%d", i)
		got, err := cl.Get(ctx, key)
		if i == 0 || i == 3 {
			if err == nil {
				t.Fatalf("removed %s came back after the restart (%d bytes)", key, len(got))
			}
			continue
		}
		if err != nil || !bytes.Equal(got, val(key, 4)) {
			t.Fatalf("get %s after the restart: %d bytes, %v (want the newest value)", key, len(got), err)
		}
	}
	if n := c.master.Core().Stats().Objects; n != 2 {
		t.Fatalf("%d objects after the restart, want 2", n)
	}
	// Puts go on through new slots.
	for round := 5; round < 8; round++ {
		if err := cl.Upsert(ctx, "u/1", val("u/1", round)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := cl.Get(ctx, "u/1"); err != nil || !bytes.Equal(got, val("u/1", 7)) {
		t.Fatalf("get u/1 after upserts on the new master: %v", err)
	}
}
