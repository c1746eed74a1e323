package election_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/election"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/objheader"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestDurableFailoverManyObjects: a new HA leader learns a node's objects
// through the same chunked re-report as a restarted master. The node
// holds 50,000 durable objects (four remount calls of at most 16,384
// reports); after the leader hands over, every one of them is on the new
// leader and reads back, and the node is mounted with nothing pending.
func TestDurableFailoverManyObjects(t *testing.T) {
	const n = 50_000
	ep, _ := startEtcd(t)
	addr := "etcd://" + ep + "/dfo"
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	durable := func() *election.Server {
		// A graceful hand-over does not wait for the lease; a long one keeps
		// a loaded machine from losing the leader (and its memory) midway.
		s, err := election.Start(election.Config{Endpoints: []string{ep}, Cluster: "dfo", LeaseTTL: 5 * time.Second,
			Master: masterserver.ServerConfig{Core: master.Config{Durable: true}, Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a := durable()
	waitRole(t, a, election.RoleLeader)
	b := durable()

	node, err := storenode.Start(ctx, storenode.Config{Master: addr, SegmentSize: 8 << 20, Engine: transfer.Config{Transport: transfer.TransportTCP},
		PingInterval: 20 * time.Millisecond, RPCTimeout: 5 * time.Second, UnmountGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	// The objects are written into the node's segment as durable puts
	// leave them (header, then value); the node's scan finds them.
	seg := node.Client().Segment()
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	keys := make([]string, n)
	var off uint64
	for i := range n {
		k, v := fmt.Sprintf("d/%06d", i), fmt.Appendf(nil, "v%07d", i)
		hl := objheader.Len(k)
		objheader.Encode(seg[off:], objheader.Header{Key: k, Seq: uint64(i + 1), Size: uint64(len(v)), CRC: crc32.Checksum(v, castagnoli)})
		copy(seg[off+hl:], v)
		off += (hl + uint64(len(v)) + objheader.Align - 1) &^ (objheader.Align - 1)
		keys[i] = k
	}
	remounts := node.Client().Health().Remounts // orders the writes before the node's scan (same lock)

	t0 := time.Now()
	a.Close()
	waitRole(t, b, election.RoleLeader)
	waitfor.Cond(t, 30*time.Second, "the node's objects on the new leader", func() bool {
		m := b.Master()
		h := node.Client().Health()
		return m != nil && h.Remounts > remounts && !h.RemountPending && m.Core().Stats().Objects == n
	})
	t.Logf("failover: %d objects on the new leader %v after the hand-over", n, time.Since(t0).Round(time.Millisecond))
	if segs := b.Master().Core().Segments(); len(segs) != 1 || segs[0].Name != node.Name() {
		t.Fatalf("segments on the new leader: %+v", segs)
	}

	eng, err := transfer.Open(ctx, transfer.Config{Transport: transfer.TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := store.New(ctx, store.Config{Master: addr, Mover: eng, LocalBufferSize: 1 << 20, PingInterval: 20 * time.Millisecond, RPCTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	for i := 0; i < n; i += 1000 {
		vals, errs := cl.BatchGet(ctx, keys[i:min(n, i+1000)])
		for j, v := range vals {
			if want := fmt.Appendf(nil, "v%07d", i+j); errs[j] != nil || !bytes.Equal(v, want) {
				_, qerr := b.Master().Core().Query(keys[i+j])
				t.Fatalf("get %s: %q %v (stats %+v, query %v, health %+v)", keys[i+j], v, errs[j], b.Master().Core().Stats(), qerr, node.Client().Health())
			}
		}
	}
}
