package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/store"
)

// BenchmarkTenantPut: 4 KiB puts (upserts of random keys of a set of
// 16,384, as `mooncake bench store --security` runs them) by one client of a pool
// without tenants and one of a tenant (policy, token, namespaced keys,
// quota accounting; durable metadata on in both). The off and on
// sub-benchmarks report ns/op, allocs/op and the process's CPU per op
// (master, nodes and client: steadier than ns/op on a shared machine);
// "paired" runs one op of each pool in turn and reports, tenants on over
// off, the ratio of their total times and of their median latencies.
func BenchmarkTenantPut(b *testing.B) {
	const size, keys = 4 << 10, 16384
	ctx := context.Background()
	v := value("bench", size)
	off := newClusterTB(b, master.Config{Durable: true}, 2, 256<<20).client(nil)
	on := newTenantCluster(b, master.Config{Durable: true}, 2, 256<<20).tenantClient("token-b-first")
	cls := [2]*store.Client{off, on}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("s/tenants/4096/1/0/%d", i)
	}
	for _, cl := range cls {
		for _, k := range names {
			if err := cl.PutWith(ctx, k, v, store.PutOptions{Upsert: true}); err != nil {
				b.Fatal(err)
			}
		}
	}
	order := rand.New(rand.NewPCG(1, 7)).Perm(keys)
	put := func(b *testing.B, cl *store.Client, j int) {
		if err := cl.PutWith(ctx, names[order[j%keys]], v, store.PutOptions{Upsert: true}); err != nil {
			b.Fatal(err)
		}
	}
	for p, name := range []string{"tenants=off", "tenants=on"} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			cpu0 := processCPU()
			j := 0
			for b.Loop() {
				put(b, cls[p], j)
				j++
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
	b.Run("paired", func(b *testing.B) {
		var lat [2][]time.Duration
		var sum [2]time.Duration
		j := 0
		for b.Loop() {
			for s := range 2 {
				p := s ^ j&1
				t0 := time.Now()
				put(b, cls[p], j)
				d := time.Since(t0)
				lat[p], sum[p] = append(lat[p], d), sum[p]+d
			}
			j++
		}
		slices.Sort(lat[0])
		slices.Sort(lat[1])
		b.ReportMetric(float64(sum[1])/float64(sum[0]), "time-on/off")
		b.ReportMetric(float64(lat[1][len(lat[1])/2])/float64(lat[0][len(lat[0])/2]), "p50-on/off")
	})
}
