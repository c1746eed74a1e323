package storeprom

import (
	"github.com/kvcache-go/mooncake/store"
	"github.com/prometheus/client_golang/prometheus"
)

// HotCacheSource is what the collector reads: *store.Client.
type HotCacheSource interface {
	HotCacheStats() (store.HotCacheStats, bool)
}

var _ HotCacheSource = (*store.Client)(nil)

type hotCache struct {
	src    HotCacheSource
	labels prometheus.Labels
	descs  map[string]*prometheus.Desc
}

var hotCacheMetrics = []struct{ name, help string }{
	{"hits_total", "Gets served from the hot cache (the master confirmed the version held)."},
	{"misses_total", "Gets of keys the hot cache did not hold."},
	{"stale_total", "Gets of keys the hot cache held at an older version (read remotely, entry dropped)."},
	{"hit_ratio", "Hits over all gets of the client since it started."},
	{"entries", "Values held by the hot cache."},
	{"bytes", "Bytes of the values held by the hot cache."},
	{"capacity_bytes", "Size of the hot cache."},
	{"admitted_total", "Values taken into the hot cache."},
	{"rejected_total", "Values refused by admission (too rare, too large, or no more frequent than the values they would evict)."},
	{"evicted_total", "Values dropped to make room."},
	{"invalidated_total", "Values dropped by overwrites and removes."},
}

// HotCache is a collector of src's hot cache; labels (may be nil) are
// added to every series.
func HotCache(src HotCacheSource, labels prometheus.Labels) prometheus.Collector {
	c := &hotCache{src: src, labels: labels, descs: map[string]*prometheus.Desc{}}
	for _, m := range hotCacheMetrics {
		c.descs[m.name] = prometheus.NewDesc("mooncake_store_hot_cache_"+m.name, m.help, nil, labels)
	}
	c.descs["get_seconds"] = prometheus.NewDesc("mooncake_store_hot_cache_get_seconds",
		"Latency of single-key gets of a client with the hot cache on, served from the cache or read remotely.", []string{"source"}, labels)
	return c
}

func (c *hotCache) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *hotCache) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.src.HotCacheStats()
	if !ok {
		return
	}
	gets := st.Hits + st.Misses + st.Stale
	ratio := 0.0
	if gets > 0 {
		ratio = float64(st.Hits) / float64(gets)
	}
	counter := func(name string, v uint64) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.CounterValue, float64(v))
	}
	gauge := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v)
	}
	counter("hits_total", st.Hits)
	counter("misses_total", st.Misses)
	counter("stale_total", st.Stale)
	gauge("hit_ratio", ratio)
	gauge("entries", float64(st.Entries))
	gauge("bytes", float64(st.Bytes))
	gauge("capacity_bytes", float64(st.Capacity))
	counter("admitted_total", st.Admitted)
	counter("rejected_total", st.Rejected)
	counter("evicted_total", st.Evicted)
	counter("invalidated_total", st.Invalidated)
	for _, h := range []struct {
		source string
		h      store.Histogram
	}{{"cache", st.HitLatency}, {"remote", st.MissLatency}} {
		buckets := make(map[float64]uint64, len(h.h.Bounds))
		var cum uint64
		for i, b := range h.h.Bounds {
			cum += h.h.Counts[i]
			buckets[b] = cum
		}
		ch <- prometheus.MustNewConstHistogram(c.descs["get_seconds"], h.h.Count, h.h.Sum, buckets, h.source)
	}
}
