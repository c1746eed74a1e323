package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/store"
)

// BenchmarkScrubChurn: clients put values of new keys in turn into a full
// pool with tenants and grants on (every put evicts: the pool holds 256 of
// them), the master scrubbing freed extents or not: one client of tenant b
// (tenants=1: its puts take its own evicted space back), or one of b and
// one of the admin's raw key space (tenants=2: half the evicted space
// changes owner, and is zeroed first). Reports the puts refused for want
// of room (refused/op: scrubbing makes a put wait for no eviction while
// freed space is being zeroed, and fail instead) besides ns/op.
func BenchmarkScrubChurn(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10} {
		for _, tenants := range []int{1, 2} {
			for _, scrub := range []bool{false, true} {
				b.Run(fmt.Sprintf("%dKiB/tenants=%d/scrub=%v", size>>10, tenants, scrub), func(b *testing.B) {
					c := newTenantGrantCluster(b, master.Config{}, uint64(256*size), !scrub)
					cls := []*store.Client{grantTenantClient(c, "token-b-first"), grantTenantClient(c, "token-ops-first")}[:tenants]
					ctx := context.Background()
					v := value("churn", size)
					for i := range 512 { // fill, and churn once
						if err := cls[i%tenants].Put(ctx, fmt.Sprint("warm/", i), v); err != nil && !errors.Is(err, store.ErrNoSpace) {
							b.Fatal(err)
						}
					}
					b.SetBytes(int64(size))
					b.ResetTimer()
					refused := 0
					for i := range b.N {
						err := cls[i%tenants].Put(ctx, fmt.Sprint("churn/", i), v)
						switch {
						case errors.Is(err, store.ErrNoSpace):
							refused++
						case err != nil:
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
					st := c.master.Core().Stats()
					b.ReportMetric(float64(st.Scrubbing), "scrubbing-B")
					b.ReportMetric(float64(st.ScrubHeld), "held-B")
				})
			}
		}
	}
}
