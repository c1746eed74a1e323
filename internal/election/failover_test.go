package election_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/election"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
	"go.uber.org/goleak"
)

// val is the value a put of key in generation gen writes: every generation
// differs, so a stale read would show.
func val(key string, gen int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("%s@%d;", key, gen)), 300)
}

// checkNoStale: every key reads back as the value of its latest generation
// or, when that generation was written before a failover, as missing.
func checkNoStale(t *testing.T, ctx context.Context, cl *store.Client, latest map[string]int, minGen int) {
	t.Helper()
	for k, g := range latest {
		got, err := cl.Get(ctx, k)
		switch {
		case err == nil && bytes.Equal(got, val(k, g)):
		case errors.Is(err, store.ErrNotFound) && g < minGen:
		default:
			t.Fatalf("get %s (gen %d, current term from %d): %d bytes %.20q, %v", k, g, minGen, len(got), got, err)
		}
	}
}

// TestFailover: two masters in one etcd election, a storage node and a
// client that both address the cluster as etcd://. The client puts, the
// leader is closed, the standby takes over, the node remounts on it, and
// puts and gets work again through the same client; then the new leader
// crashes (its lease runs out) and a third candidate takes over. No read
// ever returns wrong bytes, including while a reader runs through the
// failovers.
func TestFailover(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	ep, stopEtcd := startEtcd(t)
	addr := "etcd://" + ep + "/fo"
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	a := candidate(t, ep, "fo")
	waitRole(t, a, election.RoleLeader)
	b := candidate(t, ep, "fo")

	node, err := storenode.Start(ctx, storenode.Config{Master: addr, SegmentSize: 4 << 20, Engine: transfer.Config{Transport: transfer.TransportTCP},
		PingInterval: 20 * time.Millisecond, RPCTimeout: 5 * time.Second, UnmountGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := transfer.Open(ctx, transfer.Config{Transport: transfer.TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := store.New(ctx, store.Config{Master: addr, Mover: eng, LocalBufferSize: 1 << 20, PingInterval: 20 * time.Millisecond, RPCTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	latest := map[string]int{}
	var acked atomic.Int64 // generation of k0 last acknowledged
	putAll := func(gen int) {
		t.Helper()
		for i := range 8 {
			k := fmt.Sprintf("k%d", i)
			// A put right after a failover may find no segment until the
			// node has remounted; Upsert replaces a key the leader knows.
			if err := cl.Upsert(ctx, k, val(k, gen)); err != nil {
				t.Fatalf("put %s gen %d: %v", k, gen, err)
			}
			latest[k] = gen
			if k == "k0" {
				acked.Store(int64(gen))
			}
		}
	}
	putAll(1)
	checkNoStale(t, ctx, cl, latest, 1)

	// A reader runs through both failovers: any answer but the right
	// bytes or "not found"/a transient error fails the test.
	var wg sync.WaitGroup
	stopReader := make(chan struct{})
	var readerErr error
	var reads int
	acked.Store(1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopReader:
				return
			default:
			}
			lo := int(acked.Load())
			got, err := cl.Get(ctx, "k0")
			if err != nil {
				continue // not found, no master, lease expired: never wrong data
			}
			reads++
			ok := false
			for g := lo; g <= 3; g++ { // an older generation would be a stale read
				ok = ok || bytes.Equal(got, val("k0", g))
			}
			if !ok {
				readerErr = fmt.Errorf("read of k0 returned %.20q, acknowledged generation %d", got, lo)
				return
			}
		}
	}()

	remounts := node.Client().Remounts()
	t0 := time.Now()
	a.Close() // graceful: the standby takes over at once
	waitRole(t, b, election.RoleLeader)
	tLead := time.Since(t0)
	waitfor.Cond(t, 15*time.Second, "node remount on the new leader", func() bool { return node.Client().Remounts() > remounts })
	waitfor.Cond(t, 15*time.Second, "segment on the new leader", func() bool {
		m := b.Master()
		return m != nil && len(m.Core().Segments()) == 1
	})
	checkNoStale(t, ctx, cl, latest, 2) // the new leader started empty
	putAll(2)
	t.Logf("graceful hand-over: new leader after %v, node remounted and 8 puts done after %v", tLead, time.Since(t0))
	checkNoStale(t, ctx, cl, latest, 2)

	c := candidate(t, ep, "fo")
	waitRole(t, c, election.RoleFollower)
	remounts = node.Client().Remounts()
	t0 = time.Now()
	b.Kill() // crash: c takes over when b's lease (1 s) ends
	waitRole(t, c, election.RoleLeader)
	tLead = time.Since(t0)
	waitfor.Cond(t, 15*time.Second, "node remount after the crash", func() bool { return node.Client().Remounts() > remounts })
	waitfor.Cond(t, 15*time.Second, "segment on the third leader", func() bool {
		m := c.Master()
		return m != nil && len(m.Core().Segments()) == 1
	})
	checkNoStale(t, ctx, cl, latest, 3)
	putAll(3)
	t.Logf("crash (1 s lease): new leader after %v, node remounted and 8 puts done after %v", tLead, time.Since(t0))
	checkNoStale(t, ctx, cl, latest, 3)
	if ok, err := cl.Exist(ctx, "k7"); err != nil || !ok {
		t.Fatalf("exist k7: %v %v", ok, err)
	}

	close(stopReader)
	wg.Wait()
	if readerErr != nil {
		t.Fatal(readerErr)
	}
	if reads == 0 {
		t.Fatal("the reader never read")
	}
	t.Logf("reader: %d good reads through two failovers", reads)

	cl.Close()
	eng.Close()
	node.Close()
	for _, s := range []*election.Server{a, b, c} {
		s.Close()
	}
	stopEtcd()
	goleak.VerifyNone(t, ignore, goleak.IgnoreTopFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"))
}
