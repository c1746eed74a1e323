package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
)

// scaleObjects is above every former cliff of one message (a node's
// re-report passed gRPC's 4 MiB at ~72k objects, a bulk removal's answer
// at ~70k keys).
const scaleObjects = 200_000

// TestPoolAtScale: a durable pool of 200k objects on one node is listed in
// full, survives master restarts (every object readable again), loses half
// its keys to a remove-by-regex and the rest to a remove-all, none of which
// come back after a restart; the node stays mounted throughout (it remounts
// once per restart, never because it was dropped).
func TestPoolAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("200k objects")
	}
	c := newCluster(t, master.Config{Durable: true}, 1, 96<<20)
	cl := c.client(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	keys := make([]string, scaleObjects)
	vals := make([][]byte, scaleObjects)
	for i := range keys {
		keys[i] = fmt.Sprintf("k/%06d", i)
		vals[i] = []byte(keys[i])
	}
	for i, err := range cl.BatchPut(ctx, keys, vals, store.PutOptions{}) {
		if err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	node := c.nodes[0].Client()
	mounted := func(restarts int) {
		t.Helper()
		// The node counts a remount when its session ended, which can be
		// after the master already serves every object.
		waitfor.Within(time.Minute, func() bool { return node.Remounts() >= restarts })
		if st := c.master.Core().Stats(); st.Segments != 1 || st.ClientsDropped != 0 {
			t.Fatalf("node not mounted: %+v", st)
		}
		if n := node.Remounts(); n != restarts {
			t.Fatalf("node remounted %d times after %d master restarts", n, restarts)
		}
	}
	listAll := func() int {
		t.Helper()
		n, after := 0, ""
		for {
			page, next, err := cl.List(ctx, "k/", after, 10_000)
			if err != nil {
				t.Fatalf("list after %q: %v", after, err)
			}
			n += len(page)
			if next == "" {
				return n
			}
			after = next
		}
	}
	// present waits until exactly the keys want says are present.
	present := func(want func(i int) bool) {
		t.Helper()
		var missing, extra int
		ok := waitfor.Within(time.Minute, func() bool {
			ex, err := cl.BatchExist(ctx, keys)
			if err != nil {
				return false
			}
			missing, extra = 0, 0
			for i, e := range ex {
				switch {
				case want(i) && !e:
					missing++
				case !want(i) && e:
					extra++
				}
			}
			return missing == 0 && extra == 0
		})
		if !ok {
			t.Fatalf("after a restart: %d objects missing, %d removed ones back", missing, extra)
		}
	}
	all := func(int) bool { return true }
	none := func(int) bool { return false }
	odd := func(i int) bool { return i%2 == 1 }

	if n := listAll(); n != scaleObjects {
		t.Fatalf("listed %d of %d", n, scaleObjects)
	}
	mounted(0)

	start := time.Now()
	c.restartMaster()
	present(all)
	t.Logf("restart with %d objects: all readable after %v", scaleObjects, time.Since(start).Round(time.Millisecond))
	mounted(1)
	if n := listAll(); n != scaleObjects {
		t.Fatalf("listed %d of %d after the restart", n, scaleObjects)
	}
	if got, err := cl.Get(ctx, keys[scaleObjects-1]); err != nil || string(got) != keys[scaleObjects-1] {
		t.Fatalf("get after restart: %q %v", got, err)
	}

	n, err := cl.RemoveByRegex(ctx, `^k/\d*[02468]$`, true)
	if err != nil || n != scaleObjects/2 {
		t.Fatalf("remove by regex: %d, %v", n, err)
	}
	c.restartMaster()
	present(odd)
	mounted(2)

	if n, err := cl.RemoveAll(ctx, true); err != nil || n != scaleObjects/2 {
		t.Fatalf("remove all: %d, %v", n, err)
	}
	c.restartMaster()
	// Nothing comes back: wait for the node's remount, then check.
	if !waitfor.Within(time.Minute, func() bool { return node.Remounts() == 3 }) {
		t.Fatal("node did not remount after the third restart")
	}
	present(none)
	mounted(3)
	if n := listAll(); n != 0 {
		t.Fatalf("%d keys listed after remove-all and a restart", n)
	}
}
