package store_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/transport/shm"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// TestSegmentMemoryTracksUse: a storage node contributing a 2 GiB segment
// holds in memory (mincore on its memfd) only about what puts wrote into
// it: after it starts, after a client on the same host (shared memory: it
// maps the whole segment) puts and reads objects, and after a master
// restart makes the node scan its segment for the durable objects it
// holds. Only virtual memory is reserved: the test needs a few MiB.
func TestSegmentMemoryTracksUse(t *testing.T) {
	const segSize, objects, objSize = 2 << 30, 16, 256 << 10
	c := newCluster(t, master.Config{Durable: true}, 1, segSize)
	seg := c.nodes[0].Client().Segment()
	if len(seg) != segSize {
		t.Fatalf("segment of %d bytes", len(seg))
	}
	atMost := func(when string, max int) {
		t.Helper()
		r, err := shm.Resident(seg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d KiB of the segment in memory", when, r>>10)
		if r > max {
			t.Fatalf("%s: %d bytes of the %d-byte segment in memory, want at most %d", when, r, segSize, max)
		}
	}
	atMost("after start", 64<<10)
	cl := c.client(nil)
	ctx := ctxT(t)
	want := map[string][]byte{}
	for i := range objects {
		k := fmt.Sprint("obj/", i)
		want[k] = value(k, objSize)
		if err := cl.Put(ctx, k, want[k]); err != nil {
			t.Fatal(err)
		}
	}
	check := func() {
		t.Helper()
		for k, v := range want {
			got, err := cl.Get(ctx, k)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("get %s: %v (equal %v)", k, err, bytes.Equal(got, v))
			}
		}
	}
	check()
	const used = objects * objSize
	atMost("after puts and gets", 2*used)
	c.restartMaster()
	waitfor.Cond(t, 10*time.Second, "the node to remount its objects", func() bool {
		return c.master.Core().Stats().Objects == objects
	})
	atMost("after the remount scan", 2*used)
	check()
}
