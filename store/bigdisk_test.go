package store_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestLargeObjectsThroughDiskTier: objects of 64 MiB (four times the
// transfer engine's 16 MiB slice) are put, evicted from memory above the
// watermark, offloaded to the node's disk tier and read back from disk
// intact (CRC32C checked end to end). With MOONCAKE_CHAOS=long the same
// runs with a 1 GiB object. (Mooncake users saw evicted data never read
// back from disk, an assertion on objects above the maximum slice, and
// offloads failing.)
func TestLargeObjectsThroughDiskTier(t *testing.T) {
	sizes := []int{64 << 20}
	if os.Getenv("MOONCAKE_CHAOS") == "long" {
		sizes = append(sizes, 1<<30)
	}
	for _, size := range sizes {
		t.Run(fmt.Sprint(size>>20, "MiB"), func(t *testing.T) { largeThroughDisk(t, size) })
	}
}

func largeThroughDisk(t *testing.T, size int) {
	c := newCluster(t, master.Config{Durable: true, HighWatermark: 0.5, EvictionRatio: 0.5}, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seg := uint64(size)*3/2 + 1<<20 // one object fills two thirds: above the 0.5 watermark
	n, err := storenode.Start(ctx, storenode.Config{Master: c.master.Addr(), SegmentSize: seg, Engine: transfer.Config{Transport: "tcp"},
		PingInterval: 20 * time.Millisecond, UnmountGrace: 100 * time.Millisecond,
		RootFSDir: t.TempDir(), EnableOffload: true, OffloadOnEvict: true, DiskCapacity: 4 * uint64(size)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cl := c.client(func(cfg *store.Config) { cfg.LocalBufferSize = uint64(size) + 1<<20 })
	val := make([]byte, size)
	for i := range val {
		val[i] = byte(i*7 + i>>20)
	}
	if err := cl.Put(ctx, "big", val); err != nil {
		t.Fatalf("put %d MiB: %v", size>>20, err)
	}
	waitfor.Cond(t, 2*time.Minute, "the object evicted to disk", func() bool {
		info, err := cl.Stat(ctx, "big")
		return err == nil && len(info.Replicas) == 0 && len(info.Disk) == 1
	})
	reads := cl.DiskReads()
	got, err := cl.Get(ctx, "big")
	if err != nil {
		t.Fatalf("get %d MiB from disk: %v", size>>20, err)
	}
	if !bytes.Equal(got, val) {
		t.Fatal("value read back from disk differs")
	}
	if cl.DiskReads() != reads+1 {
		t.Fatalf("read not served from disk: %d disk reads", cl.DiskReads()-reads)
	}
}
