package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

func diskNode(t *testing.T, c *cluster, dir string, capacity uint64) *storenode.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := storenode.Start(ctx, storenode.Config{Master: c.master.Addr(), SegmentSize: 1 << 20, Engine: transfer.Config{Transport: c.transport},
		PingInterval: 20 * time.Millisecond, UnmountGrace: 100 * time.Millisecond,
		RootFSDir: dir, EnableOffload: true, OffloadOnEvict: true, PromotionOnHit: true, DiskCapacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDiskTier: objects evicted above the watermark are offloaded to the
// node's disk tier and read back from it (checksummed) and promoted into
// memory; a node restarted on the same directory re-reports its disk
// copies; a removed disk copy does not come back; the tier keeps to its
// capacity.
func TestDiskTier(t *testing.T) {
	c := newCluster(t, master.Config{Durable: true, HighWatermark: 0.5, EvictionRatio: 0.2}, 0, 0)
	dir := t.TempDir()
	n := diskNode(t, c, dir, 8<<20)
	cl := c.client(nil)
	ctx := ctxT(t)
	want := map[string][]byte{}
	for i := range 12 { // 12 x 64 KiB in a 1 MiB segment: above the 0.5 watermark
		k := fmt.Sprint("kv/", i)
		want[k] = value(k, 64<<10)
		if err := cl.Put(ctx, k, want[k]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(40 * time.Millisecond) // let the watermark eviction offload (ticks, node pings) instead of a full pool
	}
	settled := func() bool {
		for _, r := range c.master.Core().Tombstones() {
			if r.Offload {
				return false
			}
		}
		return c.master.Core().Stats().DiskObjects > 0
	}
	waitfor.Cond(t, 10*time.Second, "evicted objects on disk", settled)
	onDisk := c.master.Core().Stats().DiskObjects
	diskOnly := 0 // Stat shows disk copies (Mooncake's LOCAL_DISK replica descriptors)
	for k := range want {
		info, err := cl.Stat(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Replicas) == 0 {
			if len(info.Disk) != 1 || info.Disk[0].Segment != n.Name() || info.Disk[0].URL != n.DiskURL() || info.Disk[0].Seq == 0 {
				t.Fatalf("stat of disk-only %s: %+v", k, info.Disk)
			}
			diskOnly++
		}
	}
	if diskOnly == 0 {
		t.Fatal("Stat shows no disk-only key")
	}
	for k, v := range want {
		got, err := cl.Get(ctx, k)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %s: %v", k, err)
		}
	}
	if st := c.master.Core().Stats(); st.DiskGets == 0 || cl.DiskReads() == 0 {
		t.Fatalf("no read from disk: %+v, client counted %d", st, cl.DiskReads())
	}
	// Promotion on hit: the values read from disk are put back into memory.
	waitfor.Cond(t, 10*time.Second, "promotion", func() bool {
		for k := range want {
			if info, err := c.master.Core().Query(k); err == nil && len(info.Replicas) > 0 {
				return true
			}
		}
		return false
	})
	t.Logf("%d objects offloaded, %d disk reads", onDisk, c.master.Core().Stats().DiskGets)

	// Remove one disk-only key; it stays removed across a node restart.
	var gone string
	var fillers []string
	waitfor.Cond(t, 20*time.Second, "a disk-only key", func() bool {
		for _, k := range fillers {
			if info, err := c.master.Core().Query(k); err == nil && len(info.Replicas) == 0 && len(info.Disk) == 1 {
				gone = k
				return true
			}
		}
		// Evict again to put something on disk only.
		k := fmt.Sprint("filler/", len(fillers))
		if cl.Put(ctx, k, value(k, 64<<10)) == nil {
			fillers = append(fillers, k)
			want[k] = value(k, 64<<10)
		}
		time.Sleep(40 * time.Millisecond)
		return false
	})
	// Files are named by the first 16 bytes of the key's SHA-256 and the
	// version.
	sum := sha256.Sum256([]byte(gone))
	goneFiles := filepath.Join(dir, hex.EncodeToString(sum[:16])+"-*.obj")
	if fs, _ := filepath.Glob(goneFiles); len(fs) != 1 {
		t.Fatalf("disk copy files of the key to remove: %v, want one", fs)
	}
	if err := cl.Remove(ctx, gone, false); err != nil {
		t.Fatal(err)
	}
	delete(want, gone)
	// The node learns the removal on a ping and deletes the copy.
	waitfor.Cond(t, 10*time.Second, "the node to delete the removed key's disk copy", func() bool {
		fs, err := filepath.Glob(goneFiles)
		return err == nil && len(fs) == 0
	})
	waitfor.Cond(t, 10*time.Second, "offloads to settle", settled)

	// The node restarts on its directory: memory objects are gone with it,
	// disk copies come back.
	held := 0
	for k := range want {
		if info, err := c.master.Core().Query(k); err == nil && len(info.Replicas) == 0 && len(info.Disk) == 1 {
			held++
		}
	}
	n.Close()
	n = diskNode(t, c, dir, 8<<20)
	defer n.Close()
	if got := n.Client().Restored(); got < held {
		t.Fatalf("restarted node restored %d disk copies, %d were on disk", got, held)
	}
	back := 0
	for k, v := range want {
		got, err := cl.Get(ctx, k)
		switch {
		case err == nil && bytes.Equal(got, v):
			back++
		case errors.Is(err, store.ErrNotFound):
		default:
			t.Fatalf("get %s after node restart: %v", k, err)
		}
	}
	if back < held {
		t.Fatalf("%d keys readable after the node restart, %d were on disk", back, held)
	}
	if _, err := cl.Get(ctx, gone); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("removed disk copy came back: %v", err)
	}
	t.Logf("node restart with its disk tier: %d disk copies re-reported, %d keys readable", n.Client().Restored(), back)
}
