package storeprom

import (
	"strings"
	"testing"

	"github.com/kvcache-go/mooncake/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// scrape is the registry's text exposition.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

type fakeSource struct {
	st store.HotCacheStats
	on bool
}

func (f fakeSource) HotCacheStats() (store.HotCacheStats, bool) { return f.st, f.on }

func TestHotCache(t *testing.T) {
	bounds := []float64{0.001, 0.01}
	src := fakeSource{on: true, st: store.HotCacheStats{
		Entries: 3, Bytes: 300, Capacity: 1000, Admitted: 4, Rejected: 5, Evicted: 1, Invalidated: 2,
		Hits: 6, Misses: 3, Stale: 1,
		HitLatency:  store.Histogram{Bounds: bounds, Counts: []uint64{5, 1, 0}, Sum: 0.004, Count: 6},
		MissLatency: store.Histogram{Bounds: bounds, Counts: []uint64{0, 3, 1}, Sum: 0.05, Count: 4},
	}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(HotCache(src, prometheus.Labels{"client": "c1"}))
	want := `
# HELP mooncake_store_hot_cache_hit_ratio Hits over all gets of the client since it started.
# TYPE mooncake_store_hot_cache_hit_ratio gauge
mooncake_store_hot_cache_hit_ratio{client="c1"} 0.6
# HELP mooncake_store_hot_cache_hits_total Gets served from the hot cache (the master confirmed the version held).
# TYPE mooncake_store_hot_cache_hits_total counter
mooncake_store_hot_cache_hits_total{client="c1"} 6
# HELP mooncake_store_hot_cache_bytes Bytes of the values held by the hot cache.
# TYPE mooncake_store_hot_cache_bytes gauge
mooncake_store_hot_cache_bytes{client="c1"} 300
# HELP mooncake_store_hot_cache_get_seconds Latency of single-key gets of a client with the hot cache on, served from the cache or read remotely.
# TYPE mooncake_store_hot_cache_get_seconds histogram
mooncake_store_hot_cache_get_seconds_bucket{client="c1",source="cache",le="0.001"} 5
mooncake_store_hot_cache_get_seconds_bucket{client="c1",source="cache",le="0.01"} 6
mooncake_store_hot_cache_get_seconds_bucket{client="c1",source="cache",le="+Inf"} 6
mooncake_store_hot_cache_get_seconds_sum{client="c1",source="cache"} 0.004
mooncake_store_hot_cache_get_seconds_count{client="c1",source="cache"} 6
mooncake_store_hot_cache_get_seconds_bucket{client="c1",source="remote",le="0.001"} 0
mooncake_store_hot_cache_get_seconds_bucket{client="c1",source="remote",le="0.01"} 3
mooncake_store_hot_cache_get_seconds_bucket{client="c1",source="remote",le="+Inf"} 4
mooncake_store_hot_cache_get_seconds_sum{client="c1",source="remote"} 0.05
mooncake_store_hot_cache_get_seconds_count{client="c1",source="remote"} 4
`
	got := scrape(t, reg)
	for _, line := range strings.Split(strings.TrimSpace(want), "\n") {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("missing %q", line)
		}
	}
	if n := strings.Count(got, "# TYPE "); n != 12 {
		t.Errorf("%d metrics, want 12:\n%s", n, got)
	}
	off := prometheus.NewRegistry()
	off.MustRegister(HotCache(fakeSource{}, nil))
	if got := scrape(t, off); got != "" {
		t.Fatalf("cache off: %s", got)
	}
}
