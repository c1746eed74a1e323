package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
)

// TestDurableMasterRestart: with durable metadata, a restarted master
// learns every object from the nodes' memory: acknowledged puts (single,
// replicated, batched, upserted) read back intact, removed ones stay
// removed, and new puts never land on restored objects.
func TestDurableMasterRestart(t *testing.T) {
	c := newCluster(t, master.Config{Durable: true}, 2, 4<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	want := map[string][]byte{}
	for i := range 40 {
		k := fmt.Sprint("single/", i)
		v := value(k, 1000+i*97)
		if err := cl.PutWith(ctx, k, v, store.PutOptions{Replicas: 1 + i%2, SoftPin: i%5 == 0}); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	var keys []string
	var vals [][]byte
	for i := range 20 {
		k := fmt.Sprint("batch/", i)
		keys, vals = append(keys, k), append(vals, value(k, 70<<10))
		want[k] = vals[i]
	}
	for i, err := range cl.BatchPut(ctx, keys, vals, store.PutOptions{}) {
		if err != nil {
			t.Fatalf("batch put %d: %v", i, err)
		}
	}
	for i := range 5 { // same size: rewritten in place; other size: moved
		k := fmt.Sprint("single/", i)
		v := value(k+"v2", 1000+i*97+(i%2)*500)
		if err := cl.Upsert(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	removed := []string{"single/10", "single/11", "batch/3"}
	for _, k := range removed {
		if err := cl.Remove(ctx, k, false); err != nil {
			t.Fatal(err)
		}
		delete(want, k)
	}
	if n, err := cl.RemoveByRegex(ctx, "^batch/1[0-4]$", false); err != nil || n != 5 {
		t.Fatalf("remove by regex: %d %v", n, err)
	}
	for i := 10; i < 15; i++ {
		k := fmt.Sprint("batch/", i)
		removed = append(removed, k)
		delete(want, k)
	}

	start := time.Now()
	c.restartMaster()
	waitfor.Cond(t, 10*time.Second, "nodes to remount", func() bool {
		return len(c.master.Core().Segments()) == 2 && c.master.Core().Stats().Objects == len(want)
	})
	t.Logf("restart: %d objects restored in %v (nodes restored %d+%d replicas)", len(want), time.Since(start).Round(time.Millisecond),
		c.nodes[0].Client().Restored(), c.nodes[1].Client().Restored())
	check := func() {
		t.Helper()
		for k, v := range want {
			got, err := cl.Get(ctx, k)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("get %s after restart: %v (equal %v)", k, err, bytes.Equal(got, v))
			}
		}
		for _, k := range removed {
			if _, err := cl.Get(ctx, k); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("removed key %s: %v", k, err)
			}
		}
	}
	check()
	if info, err := cl.Stat(ctx, "single/5"); err != nil || info.SoftPinUntil.IsZero() {
		t.Fatalf("soft pin lost: %+v %v", info, err)
	}
	// New puts fill the free space around the restored objects.
	for i := range 60 {
		k := fmt.Sprint("after/", i)
		v := value(k, 30<<10)
		if err := cl.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	check()
	// A second restart restores the new objects too.
	c.restartMaster()
	waitfor.Cond(t, 10*time.Second, "nodes to remount again", func() bool {
		return c.master.Core().Stats().Objects == len(want)
	})
	check()
}

// TestConcurrentPutsOneKeyClient is Mooncake #180 through the client:
// identical puts of one key from several clients at once: one wins, the
// others fail with ErrExists, and no space is leaked.
func TestConcurrentPutsOneKeyClient(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) {
			c := newCluster(t, master.Config{Durable: durable}, 2, 4<<20)
			var cls []*store.Client
			for range 4 {
				cls = append(cls, c.client(nil))
			}
			ctx := ctxT(t)
			for round := range 5 {
				k := fmt.Sprint("prompt/", round)
				v := value(k, 100<<10)
				errs := make([]error, 8)
				var wg sync.WaitGroup
				for i := range errs {
					wg.Go(func() { errs[i] = cls[i%len(cls)].Put(ctx, k, v) })
				}
				wg.Wait()
				won := 0
				for _, err := range errs {
					switch {
					case err == nil:
						won++
					case errors.Is(err, store.ErrExists):
						var re *store.RemoteError
						if !errors.As(err, &re) || re.Code != -705 {
							t.Fatalf("code: %v", err)
						}
					default:
						t.Fatalf("put: %v", err)
					}
				}
				if won != 1 {
					t.Fatalf("round %d: %d winners", round, won)
				}
				if got, err := cls[0].Get(ctx, k); err != nil || !bytes.Equal(got, v) {
					t.Fatalf("get: %v", err)
				}
			}
			st := c.master.Core().Stats()
			var per uint64 = 100 << 10
			if durable {
				per += 64
			}
			if st.Objects != 5 || st.IncompleteObjects != 0 || st.Used != 5*per {
				t.Fatalf("leak: %+v (want used %d)", st, 5*per)
			}
		})
	}
}

// TestAboveWatermarkPutsClient is Mooncake #2187 through the client: puts
// keep succeeding far beyond the capacity (each makes room), and a pool
// full of hard-pinned objects fails a put at once with ErrNoSpace.
func TestAboveWatermarkPutsClient(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) { aboveWatermarkPuts(t, durable) })
	}
}

func aboveWatermarkPuts(t *testing.T, durable bool) {
	c := newCluster(t, master.Config{HighWatermark: 0.5, Durable: durable}, 2, 1<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	for i := range 100 { // 100 x 64 KiB = 3x the pool
		if err := cl.Put(ctx, fmt.Sprint("k", i), value(fmt.Sprint(i), 64<<10)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if _, err := cl.RemoveAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	// With durable headers the removed objects' space comes back when their
	// nodes have zeroed the headers (tombstones drained at a heartbeat);
	// fill the pool with pins only after that, so that no space frees up
	// between the failed pin and the put checked below.
	waitfor.Cond(t, 10*time.Second, "the removed objects' tombstones drained", func() bool {
		return len(c.master.Core().Tombstones()) == 0
	})
	for i := 0; ; i++ {
		err := cl.PutWith(ctx, fmt.Sprint("pin", i), value("p", 64<<10), store.PutOptions{HardPin: true})
		if err == nil {
			continue
		}
		start := time.Now()
		err = cl.Put(ctx, "one-more", value("x", 64<<10))
		var re *store.RemoteError
		if !errors.Is(err, store.ErrNoSpace) || !errors.As(err, &re) || re.Code != -200 {
			t.Fatalf("put into a pinned pool: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("no-space failure took %v", d)
		}
		return
	}
}
