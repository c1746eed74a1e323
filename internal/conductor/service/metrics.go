package service

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

var (
	descBlocks = prometheus.NewDesc("mooncake_conductor_blocks", "Distinct blocks indexed over all contexts.", nil, nil)
	descCtx    = prometheus.NewDesc("mooncake_conductor_contexts", "Contexts (tenant, model, lora, salt, block size) indexed.", nil, nil)
	descEvents = prometheus.NewDesc("mooncake_conductor_event_blocks_total",
		"Blocks of a publisher's events by result: stored, removed, duplicate, removed_unknown (stored events lost), orphaned (parent unknown), unhashable (no token ids), unresolved (pool key), skipped_group, bad_medium, capacity_dropped, owners_full.",
		[]string{"publisher", "result"}, nil)
	descLive    = prometheus.NewDesc("mooncake_conductor_publisher_blocks", "Blocks a publisher holds now, over tiers.", []string{"publisher"}, nil)
	descClears  = prometheus.NewDesc("mooncake_conductor_publisher_clears_total", "Times a publisher's blocks were forgotten (cleared event, restart, lost events).", []string{"publisher"}, nil)
	descBatches = prometheus.NewDesc("mooncake_conductor_event_batches_total",
		"A publisher's ZMQ batches by result: applied, gap, replayed, dropped (duplicate or late), bad (undecodable), restart.",
		[]string{"publisher", "result"}, nil)
)

func (s *Service) initMetrics() {
	s.reg = prometheus.NewRegistry()
	s.m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mooncake_conductor_requests_total", Help: "HTTP requests by endpoint and status code.",
	}, []string{"endpoint", "code"})
	s.m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mooncake_conductor_request_seconds", Help: "HTTP request latency by endpoint, body read to answer written.",
		Buckets: prometheus.ExponentialBuckets(5e-6, 2, 18),
	}, []string{"endpoint"})
	s.reg.MustRegister(s.m.requests, s.m.latency, collector{s})
}

// collector reads the index's and subscribers' counters at scrape time
// (kept as events come: a scrape costs the number of publishers).
type collector struct{ s *Service }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBlocks, descCtx, descEvents, descLive, descClears, descBatches} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	v := c.s.idx.GlobalView()
	ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.GaugeValue, float64(v.Blocks))
	ch <- prometheus.MustNewConstMetric(descCtx, prometheus.GaugeValue, float64(v.ContextCount))
	for k, st := range c.s.idx.Stats() {
		p := k.String()
		for _, r := range []struct {
			name string
			v    uint64
		}{{"stored", st.BlocksStored}, {"removed", st.BlocksRemoved}, {"duplicate", st.StoredDuplicate},
			{"removed_unknown", st.RemovedUnknown}, {"orphaned", st.Orphaned}, {"unhashable", st.Unhashable},
			{"unresolved", st.Unresolved}, {"skipped_group", st.SkippedGroups}, {"bad_medium", st.BadMedium},
			{"capacity_dropped", st.CapacityDropped}, {"owners_full", st.OwnersFull}} {
			ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(r.v), p, r.name)
		}
		ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(st.Live), p)
		ch <- prometheus.MustNewConstMetric(descClears, prometheus.CounterValue, float64(st.Clears), p)
	}
	for k, st := range c.s.SubStats() {
		p := k.String()
		for _, r := range []struct {
			name string
			v    uint64
		}{{"applied", st.Applied}, {"gap", st.Gaps}, {"replayed", st.Replayed}, {"dropped", st.Dropped}, {"bad", st.Bad}, {"restart", st.Restarts}} {
			ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(r.v), p, r.name)
		}
	}
}
