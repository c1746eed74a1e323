package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/store"
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
