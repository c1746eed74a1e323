package master

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkCommitNextParallel: small puts from 8 clients at once, as
// `mooncake bench store --sizes 4KiB --clients 8` makes them: each client
// upserts its own 256 keys of 4 KiB through CommitNext (the commit of its
// slot, the replaced version reused as its next slot), on a durable pool of
// two segments holding 100,000 other objects. ns/op is the wall time per
// commit over all clients together (the master's commits per second), and
// hold-ns/op the time one commit holds the master's lock (measured inside
// it, clock reads included) in the "hold" run. On a machine with fewer
// cores than clients the goroutines share them.
func BenchmarkCommitNextParallel(b *testing.B) {
	b.Run("CommitNext", func(b *testing.B) { benchCommitNextParallel(b, false) })
	b.Run("hold", func(b *testing.B) { benchCommitNextParallel(b, true) })
}

const benchCommitClients = 8

func benchCommitNextParallel(b *testing.B, hold bool) {
	m, err := New(Config{Durable: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i, name := range []string{"node-a", "node-b"} {
		spec := SegmentSpec{Name: name, Endpoint: fmt.Sprintf("10.0.0.%d:7000", i+1), Base: uint64(i+1) << 40, Size: 8 << 30}
		if err := m.MountSegment("store-"+name, spec); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 100_000 {
		k := fmt.Sprintf("pool/other/%09d", i)
		if _, err := m.PutStart("filler", k, 4096, ReplicateConfig{}); err != nil {
			b.Fatal(err)
		}
		if err := m.PutEnd("filler", k, 1); err != nil {
			b.Fatal(err)
		}
	}
	type client struct {
		id   string
		keys []string
		slot string
	}
	clients := make([]*client, benchCommitClients)
	for ci := range clients {
		c := &client{id: fmt.Sprintf("client-%d-6f1c2a9e-4b3d-4c2e-9a61-%012d", ci, ci)}
		for k := range 256 {
			key := fmt.Sprintf("bench/mooncake-cproc/4096/8/r0/%d/%d", ci, k)
			c.keys = append(c.keys, key)
			if _, err := m.PutStart(c.id, key, 4096, ReplicateConfig{}); err != nil {
				b.Fatal(err)
			}
			if err := m.PutEnd(c.id, key, 1); err != nil {
				b.Fatal(err)
			}
		}
		slot, _, err := m.PutReserve(c.id, 4096, len(c.keys[0]), ReplicateConfig{})
		if err != nil {
			b.Fatal(err)
		}
		c.slot = slot
		clients[ci] = c
	}
	var held atomic.Int64
	var next atomic.Int64
	n := int64(b.N)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var h time.Duration
			defer func() { held.Add(int64(h)) }()
			for i := 0; ; i++ {
				if next.Add(1) > n {
					return
				}
				key := c.keys[i%len(c.keys)]
				ask := SlotAsk{Size: 4096, KeyLen: len(key)}
				var out Committed
				if hold {
					var d time.Duration
					out, d = commitNextHeld(m, c.id, key, c.slot, 1, ReplicateConfig{}, true, ask)
					h += d
				} else {
					out = m.CommitNext(c.id, key, c.slot, 1, ReplicateConfig{}, true, ask)
				}
				if out.Gone || out.Err != nil || out.Slot == "" {
					b.Errorf("CommitNext of %q = %+v", key, out)
					return
				}
				c.slot = out.Slot
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if hold {
		b.ReportMetric(float64(held.Load())/float64(b.N), "hold-ns/op")
	}
	if st := m.Stats(); st.PutSlots != benchCommitClients {
		b.Fatalf("%d put slots after the run, want %d", st.PutSlots, benchCommitClients)
	}
}
