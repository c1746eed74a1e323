package store_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/disktier"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
)

// stallingDisk is a disk tier whose writes block until released: a disk
// that stalls for longer than the client TTL.
type stallingDisk struct {
	*disktier.Tier
	entered chan struct{} // one value per write that started
	release chan struct{} // closed: writes go through
}

func (d *stallingDisk) Store(object []byte) (store.DiskObject, error) {
	select {
	case d.entered <- struct{}{}:
	default:
	}
	<-d.release
	return d.Tier.Store(object)
}

func (d *stallingDisk) StoreBatch(objects [][]byte) ([]store.DiskObject, []error) {
	select {
	case d.entered <- struct{}{}:
	default:
	}
	<-d.release
	return d.Tier.StoreBatch(objects)
}

// TestDiskStallKeepsNodeAlive: a storage node whose disk write (the offload
// of an evicted object) stalls for four client TTLs keeps pinging: the
// master never drops it, its segment stays mounted and its objects
// readable; when the disk comes back the offload completes and the evicted
// object reads back from disk. (Mooncake's client TTL of 10 s was missed
// when a 3.5 s SSD batch read or a 20 s buffer registration held the ping
// channel, and live segments were evicted.)
func TestDiskStallKeepsNodeAlive(t *testing.T) {
	const ttl = 400 * time.Millisecond
	c := newCluster(t, master.Config{Durable: true, ClientTTL: ttl, HighWatermark: 0.5, EvictionRatio: 0.2}, 0, 0)
	tier, err := disktier.Open(disktier.Config{Dir: t.TempDir(), Capacity: 64 << 20, URL: "http://127.0.0.1:1", OffloadOnEvict: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	disk := &stallingDisk{Tier: tier, entered: make(chan struct{}, 1), release: make(chan struct{})}
	released := false
	node := c.client(func(cfg *store.Config) { cfg.SegmentSize = 1 << 20; cfg.Disk = disk })
	t.Cleanup(func() { // before the client's Close (cleanups run last first)
		if !released {
			close(disk.release)
		}
	})
	ctx := ctxT(t)
	vals := map[string][]byte{}
	for i := range 12 { // 12 x 64 KiB in a 1 MiB segment: above the 0.5 watermark
		k := fmt.Sprint("kv/", i)
		vals[k] = bytes.Repeat([]byte{byte(i + 1)}, 64<<10)
		if err := node.Put(ctx, k, vals[k]); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-disk.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no offload to disk started")
	}
	stalled := time.Now()
	// The disk write hangs; for 4 TTLs the node must stay a member.
	for time.Since(stalled) < 4*ttl {
		if st := c.master.Core().Stats(); st.ClientsDropped != 0 || st.Segments != 1 {
			t.Fatalf("node dropped %v into a disk stall (TTL %v): %+v", time.Since(stalled), ttl, st)
		}
		time.Sleep(20 * time.Millisecond) // sampling the master's view during the stall
	}
	if h := node.Health(); h.PingFailures != 0 || time.Since(h.LastPingOK) > ttl {
		t.Fatalf("pings stopped during the disk stall: %+v", h)
	}
	for k, v := range vals {
		if info, err := node.Stat(ctx, k); err == nil && len(info.Replicas) > 0 {
			got, err := node.Get(ctx, k)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("get %s during the stall: %v", k, err)
			}
		}
	}
	close(disk.release)
	released = true
	waitfor.Cond(t, 10*time.Second, "evicted objects offloaded to disk", func() bool {
		return c.master.Core().Stats().DiskObjects > 0
	})
	if st := c.master.Core().Stats(); st.ClientsDropped != 0 {
		t.Fatalf("node dropped: %+v", st)
	}
}
