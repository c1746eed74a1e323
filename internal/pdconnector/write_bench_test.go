package pdconnector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/transfer"
)

// benchSide allocates tp ranks of layout l's layer regions in te's managed
// memory and returns the planner's view of them.
func benchSide(b *testing.B, te *transfer.Engine, l kvcache.Layout, tp int) Side {
	b.Helper()
	l.TP = tp
	s := Side{RankHeads: l.RankHeads()}
	for range tp {
		var bases []uint64
		for range l.NumLayers {
			m, err := te.AllocateManaged(l.LayerBytes())
			if err != nil {
				b.Fatal(err)
			}
			for i := range m {
				m[i] = byte(i)
			}
			bases = append(bases, uint64(transfer.AddrOf(m)))
		}
		s.Bases = append(s.Bases, bases)
	}
	return s
}

// BenchmarkPushWrites times a push (PlanWrites over every layer, then one
// Transfer of its requests) between two engines of this process, shared
// memory, for TP pairs and two KV geometries (the built-in models tiny-tp
// and wide-kv), moving one block (the fixed cost of a transfer) or a whole
// prompt (with the caches flushed between pushes, as KV blocks are cold in
// a serving engine). plan-us is the planner's share of each push; GB/s
// counts the Transfer alone.
func BenchmarkPushWrites(b *testing.B) {
	for _, g := range []struct {
		name string
		l    kvcache.Layout
	}{
		{"tiny-tp", kvcache.Layout{NumLayers: 2, NumBlocks: 128, BlockSize: 16, NumKVHeads: 4, HeadDim: 16}},     // 2,048 tokens: 2 MiB
		{"wide-kv", kvcache.Layout{NumLayers: 4, NumBlocks: 16, BlockSize: 16, NumKVHeads: 4 * 2, HeadDim: 128}}, // 256 tokens: 8 MiB
	} {
		for _, blocks := range []int{1, g.l.NumBlocks} {
			for _, pq := range [][2]int{{1, 1}, {2, 2}, {4, 4}, {1, 2}, {2, 1}, {1, 4}, {4, 1}, {2, 4}, {4, 2}} {
				b.Run(fmt.Sprintf("%s/blocks=%d/tp=%d-%d", g.name, blocks, pq[0], pq[1]), func(b *testing.B) {
					benchPush(b, g.l, blocks, pq[0], pq[1])
				})
			}
		}
	}
}

func benchPush(b *testing.B, l kvcache.Layout, blocks, p, q int) {
	ctx := context.Background()
	a, err := transfer.Open(ctx, transfer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	d, err := transfer.Open(ctx, transfer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	src, dst := benchSide(b, a, l, p), benchSide(b, d, l, q)
	seg, err := a.OpenSegment(ctx, d.Name())
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]int, blocks)
	for i := range ids {
		ids[i] = i
	}
	total := l.NumLayers * blocks * l.FullBlockBytes()
	b.SetBytes(int64(total))
	b.ReportAllocs()
	var flush []byte
	if blocks > 1 {
		flush = make([]byte, 64<<20)
	}
	var plan, xfer time.Duration
	for b.Loop() {
		if flush != nil {
			b.StopTimer()
			for i := 0; i < len(flush); i += 64 {
				flush[i]++
			}
			b.StartTimer()
		}
		t := time.Now()
		byLayer, err := PlanWrites(seg, src, dst, l.HeadBytes(), ids, ids)
		if err != nil {
			b.Fatal(err)
		}
		var reqs []transfer.Request
		for _, r := range byLayer {
			reqs = append(reqs, r...)
		}
		t2 := time.Now()
		if err := a.Transfer(ctx, reqs); err != nil {
			b.Fatal(err)
		}
		plan += t2.Sub(t)
		xfer += time.Since(t2)
	}
	b.ReportMetric(float64(plan.Nanoseconds())/1e3/float64(b.N), "plan-us")
	b.ReportMetric(float64(xfer.Nanoseconds())/1e3/float64(b.N), "xfer-us")
	b.ReportMetric(float64(total)*float64(b.N)/xfer.Seconds()/1e9, "xfer-GB/s")
}
