package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
)

// Small puts after the first take a slot the previous one reserved (one
// master round trip); refused puts through a slot leave the stored value
// as it was, also across a master restart (their headers are zeroed).
func TestPutSlots(t *testing.T) {
	c := newCluster(t, master.Config{Durable: true}, 2, 16<<20)
	cl := c.client(nil)
	ctx := context.Background()
	if err := cl.Put(ctx, "s/0", value("s/0", 4096)); err != nil {
		t.Fatal(err)
	}
	held := store.SlotKeys(cl)
	if len(held) != 1 {
		t.Fatalf("slots after the first put: %v", held)
	}
	for i := 1; i < 20; i++ {
		key := fmt.Sprintf("s/%d", i)
		if err := cl.Put(ctx, key, value(key, 4096)); err != nil {
			t.Fatal(err)
		}
		now := store.SlotKeys(cl)
		if len(now) != 1 || slices.Equal(now, held) {
			t.Fatalf("put %d did not use its slot: before %v, after %v", i, held, now)
		}
		held = now
	}
	v2 := value("other", 4096)
	if err := cl.Upsert(ctx, "s/1", v2); err != nil {
		t.Fatal(err)
	}
	if err := cl.Put(ctx, "s/2", v2); !errors.Is(err, store.ErrExists) {
		t.Fatalf("put of an existing key through a slot: %v", err)
	}
	if _, err := cl.Get(ctx, "s/3"); err != nil { // leased for 10 s
		t.Fatal(err)
	}
	if err := cl.Upsert(ctx, "s/3", v2); err != nil { // no lease check, as Mooncake's upsert
		t.Fatalf("upsert of a leased key through a slot: %v", err)
	}
	check := func(when string) {
		t.Helper()
		for i := range 20 {
			key := fmt.Sprintf("s/%d", i)
			want := value(key, 4096)
			if i == 1 || i == 3 {
				want = v2
			}
			got, err := cl.Get(ctx, key)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: get %s: %d bytes, %v (want the acknowledged value)", when, key, len(got), err)
			}
		}
	}
	check("before restart")
	c.restartMaster()
	waitfor.Cond(t, 10*time.Second, "nodes to remount with the objects", func() bool {
		return c.master.Core().Stats().Objects == 20
	})
	check("after restart")
	// The fast connection died with the old master: its slots are not used.
	for i := range 5 {
		key := fmt.Sprintf("after/%d", i)
		if err := cl.Put(ctx, key, value(key, 4096)); err != nil {
			t.Fatalf("put after the restart: %v", err)
		}
		if got, err := cl.Get(ctx, key); err != nil || !bytes.Equal(got, value(key, 4096)) {
			t.Fatalf("get %s after the restart: %v", key, err)
		}
	}
	if len(store.SlotKeys(cl)) != 1 {
		t.Fatalf("no slot held after puts on the new master: %v", store.SlotKeys(cl))
	}
}

// A slot older than its maximum age by the client's clock is given back
// and the put is made the usual way (the client reserves a new slot).
func TestPutSlotAge(t *testing.T) {
	c := newCluster(t, master.Config{}, 1, 16<<20)
	clk := clock.NewFake(time.Now())
	cl := c.client(func(cfg *store.Config) { cfg.Clock = clk })
	ctx := context.Background()
	if err := cl.Put(ctx, "age/0", value("age/0", 4096)); err != nil {
		t.Fatal(err)
	}
	first := store.SlotKeys(cl)
	if len(first) != 1 {
		t.Fatalf("slots after the first put: %v", first)
	}
	clk.Advance(store.SlotMaxAge + time.Second)
	if err := cl.Put(ctx, "age/1", value("age/1", 4096)); err != nil {
		t.Fatal(err)
	}
	st := c.master.Core().Stats()
	if st.PutRevokes != 1 || st.PutSlots != 1 {
		t.Fatalf("after a put past the slot's age: %d revokes, %d slots, want 1 and 1", st.PutRevokes, st.PutSlots)
	}
	if now := store.SlotKeys(cl); len(now) != 1 || slices.Equal(now, first) {
		t.Fatalf("slots before %v, after %v: want one new slot", first, now)
	}
	if got, err := cl.Get(ctx, "age/1"); err != nil || !bytes.Equal(got, value("age/1", 4096)) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
}
