package store_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
)

// The hot calls go over fastrpc by default, over gRPC with NoFastRPC, and
// both give the same results; a master restart breaks the fast connection
// and the client dials it again.
func TestFastRPCPath(t *testing.T) {
	c := newCluster(t, master.Config{}, 2, 16<<20)
	fast := c.client(nil)
	slow := c.client(func(cfg *store.Config) { cfg.NoFastRPC = true })
	ctx := context.Background()
	for i, cl := range []*store.Client{fast, slow} {
		key := fmt.Sprintf("fast/%d", i)
		v := value(key, 4096)
		if err := cl.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
		for _, other := range []*store.Client{fast, slow} {
			got, err := other.Get(ctx, key)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("get %s: %d bytes, %v", key, len(got), err)
			}
		}
		if ok, err := cl.Exist(ctx, key); err != nil || !ok {
			t.Fatalf("exist %s = %v, %v", key, ok, err)
		}
		if err := cl.Put(ctx, key, v); err == nil {
			t.Fatalf("second put of %s succeeded, want ErrExists", key)
		}
	}
	if !store.FastConnected(fast) {
		t.Fatal("the default client did not use the fast path")
	}
	if store.FastConnected(slow) {
		t.Fatal("the NoFastRPC client opened a fast connection")
	}
	for _, cl := range []*store.Client{fast, slow} {
		res, err := cl.BatchExist(ctx, []string{"fast/0", "fast/1", "fast/none", ""})
		if err != nil || len(res) != 4 || !res[0] || !res[1] || res[2] || res[3] {
			t.Fatalf("batch exist = %v, %v", res, err)
		}
	}

	c.restartMaster()
	waitfor.Cond(t, 10*time.Second, "nodes to remount", func() bool { return len(c.master.Core().Segments()) == 2 })
	// The fast connection died with the old master; calls go over gRPC
	// until the next dial succeeds (after a short backoff).
	waitfor.Cond(t, 10*time.Second, "the fast path to be dialled again", func() bool {
		_, err := fast.Exist(ctx, "fast/0")
		return err == nil && store.FastConnected(fast)
	})
	for i := range 20 {
		key := fmt.Sprintf("after/%d", i)
		if err := fast.Put(ctx, key, value(key, 4096)); err != nil {
			t.Fatalf("put after restart: %v", err)
		}
		if got, err := slow.Get(ctx, key); err != nil || !bytes.Equal(got, value(key, 4096)) {
			t.Fatalf("get after restart: %d bytes, %v", len(got), err)
		}
	}
}

// TestFastConnShared: clients of one process share one fastrpc connection
// to their master; one client's Close leaves it working for the others;
// after a master restart they share a new one; concurrent puts and gets of
// several clients over the shared connection all get their own answers.
func TestFastConnShared(t *testing.T) {
	pool := withPool(store.NewConnPool(1))
	c := newCluster(t, master.Config{}, 2, 16<<20)
	ctx := context.Background()
	a, b, d := c.client(pool), c.client(pool), c.client(pool)
	for _, cl := range []*store.Client{a, b, d} {
		if err := cl.Put(ctx, fmt.Sprintf("shared/%p", cl), value("shared", 4096)); err != nil {
			t.Fatal(err)
		}
	}
	if !store.SameFastConn(a, b) || !store.SameFastConn(b, d) {
		t.Fatal("clients of one process do not share their fast connection")
	}
	d.Close()
	if _, err := a.Exist(ctx, "shared/x"); err != nil || !store.FastConnected(a) || !store.SameFastConn(a, b) {
		t.Fatalf("after another client's Close: err %v, connected %v", err, store.FastConnected(a))
	}

	c.restartMaster()
	waitfor.Cond(t, 10*time.Second, "nodes to remount", func() bool { return len(c.master.Core().Segments()) == 2 })
	waitfor.Cond(t, 10*time.Second, "both clients on a new fast connection", func() bool {
		_, errA := a.Exist(ctx, "shared/x")
		_, errB := b.Exist(ctx, "shared/x")
		return errA == nil && errB == nil && store.FastConnected(a) && store.FastConnected(b)
	})
	if !store.SameFastConn(a, b) {
		t.Fatal("after the restart the clients dialled a connection each")
	}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g, cl := range []*store.Client{a, b} {
		for w := range 4 {
			wg.Go(func() {
				for i := range 50 {
					key := fmt.Sprintf("shared/%d/%d/%d", g, w, i)
					v := value(key, 4096)
					if err := cl.Put(ctx, key, v); err != nil {
						errs <- err
						return
					}
					got, err := cl.Get(ctx, key)
					if err != nil || !bytes.Equal(got, v) {
						errs <- fmt.Errorf("get %s: %d bytes, %v", key, len(got), err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestFastConnLanes: with two lanes, clients take the pool's two
// connections in turn.
func TestFastConnLanes(t *testing.T) {
	pool := withPool(store.NewConnPool(2))
	c := newCluster(t, master.Config{}, 1, 16<<20)
	ctx := context.Background()
	conns := map[any]int{}
	for i := range 4 {
		cl := c.client(pool)
		if _, err := cl.Exist(ctx, "lanes"); err != nil || !store.FastConnected(cl) {
			t.Fatalf("client %d: %v, connected %v", i, err, store.FastConnected(cl))
		}
		conns[store.FastConn(cl)]++
	}
	if len(conns) != 2 {
		t.Fatalf("4 clients on %d connections, want 2: %v", len(conns), conns)
	}
	for conn, n := range conns {
		if n != 2 {
			t.Fatalf("connection %p has %d clients, want 2", conn, n)
		}
	}
}

// withPool makes a cluster's clients take their fast connections from p.
func withPool(p *store.ConnPool) func(*store.Config) {
	return func(cfg *store.Config) { cfg.ConnPool = p }
}
