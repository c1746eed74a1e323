package store_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/objheader"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestDurableRestartManyObjects: a node holding 200,000 small durable
// objects survives a master restart, and another restart in the middle of
// its re-report. Re-reported in one message they
// would take about 12 MiB, three times gRPC's 4 MiB limit (the remount
// would be refused at every ping and the objects lost); in chunks every
// object comes back, readable, and the node stays mounted.
//
// Most objects are written straight into the node's segment (header and
// value, as a durable put leaves them) past those put through the client:
// the node's scan sees them all the same, and the test stays fast under
// -race.
func TestDurableRestartManyObjects(t *testing.T) {
	const n = 200_000
	c := newCluster(t, master.Config{Durable: true}, 1, 40<<20)
	node := c.nodes[0]
	cl := c.client(nil)
	ctx := ctxT(t)
	want := map[string][]byte{}
	var end uint64 // past the objects put through the client
	seg := node.Client().Segment()
	base := uint64(transfer.AddrOf(seg))
	for i := range 100 {
		k := fmt.Sprint("put/", i)
		v := value(k, 1000+i)
		if err := cl.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
		info, err := c.master.Core().Query(k)
		if err != nil {
			t.Fatal(err)
		}
		end = max(end, info.Replicas[0].Addr-base+info.Size)
	}
	off := (end + objheader.Align - 1) &^ (objheader.Align - 1)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	direct := make([]string, n)
	for i := range n {
		k := fmt.Sprintf("d/%06d", i)
		v := fmt.Appendf(nil, "v%07d", i)
		hl := objheader.Len(k)
		if off+hl+uint64(len(v)) > uint64(len(seg)) {
			t.Fatalf("segment full at object %d", i)
		}
		objheader.Encode(seg[off:], objheader.Header{Key: k, Seq: uint64(i + 1), Size: uint64(len(v)), CRC: crc32.Checksum(v, castagnoli)})
		copy(seg[off+hl:], v)
		off += (hl + uint64(len(v)) + objheader.Align - 1) &^ (objheader.Align - 1)
		direct[i] = k
		want[k] = v
	}
	remounts := node.Client().Health().Remounts // orders the writes above before the node's scan (its ping loop takes the same lock)

	// The master restarts, and restarts again once the node's re-report
	// is under way: the node's next call fails, and it reports everything
	// again to the newest master.
	c.restartMaster()
	waitfor.Cond(t, 30*time.Second, "the re-report to begin", func() bool { return c.master.Core().Stats().Objects > 0 })
	cut := c.master.Core().Stats().Objects
	start := time.Now()
	c.restartMaster()
	waitfor.Cond(t, 60*time.Second, "the node to re-report every object", func() bool {
		h := node.Client().Health()
		return h.Remounts > remounts && !h.RemountPending && c.master.Core().Stats().Objects == len(want)
	})
	took := time.Since(start)
	calls, maxBytes, total := store.LastRemount(node.Client())
	t.Logf("second restart after %d objects of the first re-report; then %d objects restored in %v: %d remount calls, largest %d bytes, %d bytes in all",
		cut, len(want), took.Round(time.Millisecond), calls, maxBytes, total)
	if total <= 4<<20 || calls < total/store.RemountChunkBytes || maxBytes > store.RemountChunkBytes+64<<10 {
		t.Fatalf("remount of %d bytes in %d calls, the largest %d bytes", total, calls, maxBytes)
	}
	if segs := c.master.Core().Segments(); len(segs) != 1 || segs[0].Name != node.Name() {
		t.Fatalf("segments after the restart: %+v", segs)
	}

	// Every object reads back (200 batch gets: on a loaded machine under
	// -race this takes longer than ctxT's 20 s).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for k, v := range want {
		if !strings.HasPrefix(k, "put/") {
			continue
		}
		if got, err := cl.Get(ctx, k); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %s: %v", k, err)
		}
	}
	for i := 0; i < n; i += 2000 {
		keys := direct[i:min(n, i+2000)]
		vals, errs := cl.BatchGet(ctx, keys)
		for j, k := range keys {
			if errs[j] != nil || !bytes.Equal(vals[j], want[k]) {
				t.Fatalf("get %s: %q %v", k, vals[j], errs[j])
			}
		}
	}
	// New puts land in free space, and the node stays mounted.
	for i := range 20 {
		k := fmt.Sprint("after/", i)
		if err := cl.Put(ctx, k, value(k, 4000)); err != nil {
			t.Fatal(err)
		}
	}
	h := node.Client().Health()
	if h.RemountPending || len(c.master.Core().Segments()) != 1 || c.master.Core().Stats().Objects != len(want)+20 {
		t.Fatalf("after the restore: health %+v, stats %+v", h, c.master.Core().Stats())
	}
}
