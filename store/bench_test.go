package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/transport/shm"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// BenchmarkStore measures Put (upsert in place) and Get of one key per size
// against an in-process master and two storage nodes.
func BenchmarkStore(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		name := fmt.Sprintf("%dKiB", size>>10)
		b.Run("put/"+name, func(b *testing.B) { benchOp(b, size, false) })
		b.Run("get/"+name, func(b *testing.B) { benchOp(b, size, true) })
	}
}

func benchOp(b *testing.B, size int, get bool) {
	c := newBenchCluster(b)
	cl := c.client(func(cfg *store.Config) { cfg.LocalBufferSize = 4 << 20 })
	ctx := context.Background()
	v := value("bench", size)
	if err := cl.Put(ctx, "bench", v); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var err error
		if get {
			_, err = cl.Get(ctx, "bench")
		} else {
			err = cl.PutWith(ctx, "bench", v, store.PutOptions{Upsert: true})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func newBenchCluster(b *testing.B) *cluster {
	// newCluster takes a *testing.T for its helpers; adapt through testing.TB.
	return newClusterTB(b, master.Config{}, 2, 64<<20)
}

// BenchmarkGetInto reads into registered memory (no allocation per read).
func BenchmarkGetInto(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			c := newBenchCluster(b)
			cl := c.client(nil)
			ctx := context.Background()
			if err := cl.Put(ctx, "bench", value("bench", size)); err != nil {
				b.Fatal(err)
			}
			dst := make([]byte, size)
			if err := cl.RegisterBuffer(dst); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cl.GetInto(ctx, "bench", dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBatch measures BatchPut (upsert) and BatchGet of 32 keys of 4 KiB.
func BenchmarkBatch(b *testing.B) {
	const n, size = 32, 4 << 10
	c := newBenchCluster(b)
	cl := c.client(nil)
	ctx := context.Background()
	keys := make([]string, n)
	vals := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("batch/%d", i)
		vals[i] = value(keys[i], size)
	}
	b.Run("put", func(b *testing.B) {
		b.SetBytes(n * size)
		for b.Loop() {
			for i, err := range cl.BatchPut(ctx, keys, vals, store.PutOptions{Upsert: true}) {
				if err != nil {
					b.Fatal(i, err)
				}
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		b.SetBytes(n * size)
		for b.Loop() {
			if _, errs := cl.BatchGet(ctx, keys); errs[0] != nil {
				b.Fatal(errs[0])
			}
		}
	})
}

// BenchmarkFirstOp: a new client's first operations against a storage node
// with a 4 GiB segment on the same host: open a transfer engine, connect to
// the master, put 1 MiB and read it back (over shared memory, mapping the
// node's segment), with peers' buffers mapped with MAP_POPULATE
// ("populate") and lazily (the default, "lazy"); one fresh node for each.
// Reported: ns/op for all of it, the first iteration alone in first-ns
// (the one that populates the node's memory), and the node's segment
// bytes in memory after it started (start-MiB) and after the last
// iteration (node-MiB). "populate" allocates the whole segment: run with
// -benchtime=Nx.
func BenchmarkFirstOp(b *testing.B) {
	const segSize, size = 4 << 30, 1 << 20
	for _, pc := range []struct {
		name     string
		populate bool
	}{{"lazy", false}, {"populate", true}} {
		b.Run(pc.name, func(b *testing.B) {
			c := newClusterTB(b, master.Config{}, 1, segSize)
			seg := c.nodes[0].Client().Segment()
			resident := func() float64 {
				r, err := shm.Resident(seg)
				if err != nil {
					b.Fatal(err)
				}
				return float64(r) / (1 << 20)
			}
			start := resident()
			ctx := context.Background()
			v := value("first", size)
			var first time.Duration
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				eng, err := transfer.Open(ctx, transfer.Config{ShmPopulateWhole: pc.populate})
				if err != nil {
					b.Fatal(err)
				}
				cl, err := store.New(ctx, store.Config{Master: c.master.Addr(), Mover: eng, LocalBufferSize: 4 << 20})
				if err != nil {
					b.Fatal(err)
				}
				k := fmt.Sprint("first/", i)
				if err := cl.Put(ctx, k, v); err != nil {
					b.Fatal(err)
				}
				if got, err := cl.Get(ctx, k); err != nil || len(got) != size {
					b.Fatalf("get: %d bytes, %v", len(got), err)
				}
				if i == 0 {
					first = time.Since(t0)
				}
				b.StopTimer()
				_ = cl.CloseWithGrace(0)
				eng.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(first.Nanoseconds()), "first-ns")
			b.ReportMetric(start, "start-MiB")
			b.ReportMetric(resident(), "node-MiB")
		})
	}
}
