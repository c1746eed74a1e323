package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvcache-go/mooncake/internal/kvevents"
)

func (p *Proxy) initMetrics() {
	p.reg = prometheus.NewRegistry()
	p.mRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mooncake_proxy_requests_total", Help: "Client requests by endpoint and HTTP status code.",
	}, []string{"endpoint", "code"})
	p.mUpErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mooncake_proxy_upstream_errors_total", Help: "Failed upstream requests (network error or 5xx) by role and instance.",
	}, []string{"role", "instance"})
	p.mNoInst = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mooncake_proxy_no_instance_total", Help: "Requests refused with 503 because no instance of a role was healthy.",
	}, []string{"role"})
	p.mRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mooncake_proxy_rejected_total", Help: "Requests rejected early with 429 because every instance of a role was at its in-flight limit.",
	}, []string{"role"})
	p.mSLO = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mooncake_proxy_ttft_slo_rejected_total", Help: "Requests rejected early with 429 because the conductor's predicted time to first token exceeded the TTFT SLO on every prefill instance.",
	})
	p.mDisconnect = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mooncake_proxy_client_disconnects_total", Help: "Requests whose client went away before the answer ended; both upstream halves were cancelled.",
	})
	p.mTTFB = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "mooncake_proxy_decode_first_byte_seconds", Help: "Time from request arrival to decode's response headers.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	p.mIndexer = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mooncake_proxy_indexer_queries_total", Help: "Queries to the remote KV cache indexer by result (ok, error: the request was routed without it).",
	}, []string{"result"})
	p.mTokenize = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mooncake_proxy_tokenize_errors_total", Help: "Prompts that could not be tokenized (engine /tokenize failed): routed without cache information.",
	})
	p.reg.MustRegister(p.mIndexer, p.mTokenize)
	p.instanceGauges()
	p.eventMetrics()
	p.reg.MustRegister(p.mRequests, p.mUpErrors, p.mNoInst, p.mRejected, p.mSLO, p.mDisconnect, p.mTTFB)
}

// instanceGauges exports each instance's health and in-flight count, and
// the conductor's queue per prefill instance.
func (p *Proxy) instanceGauges() {
	gauge := func(name, help string, f func(*instance) float64) {
		for _, in := range append(append([]*instance{}, p.prefill...), p.decode...) {
			in := in
			p.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: name, Help: help, ConstLabels: prometheus.Labels{"role": in.role, "instance": in.url},
			}, func() float64 { return f(in) }))
		}
	}
	gauge("mooncake_proxy_instance_healthy", "1 if the instance is in rotation.", func(in *instance) float64 {
		if h, _, _ := in.snapshot(); h {
			return 1
		}
		return 0
	})
	gauge("mooncake_proxy_instance_inflight", "Requests in flight on the instance.", func(in *instance) float64 {
		return float64(in.inflight.Load())
	})
	if c := p.conductor; c != nil {
		for _, in := range p.prefill {
			in := in
			p.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "mooncake_proxy_instance_queued_prefill_seconds", Help: "Conductor: predicted prefill seconds of the requests dispatched to the instance and not yet answered.",
				ConstLabels: prometheus.Labels{"role": in.role, "instance": in.url},
			}, func() float64 { s, _ := c.Queue(in.url); return s }))
		}
	}
}

// eventMetrics exports the KV event streams of the prefill instances that
// publish them.
func (p *Proxy) eventMetrics() {
	for _, in := range p.prefill {
		if in.events == "" {
			continue
		}
		in := in
		stat := func(f func(kvevents.SubStats) uint64) func() float64 {
			return func() float64 { return float64(f(p.EventStats()[in.url])) }
		}
		for result, f := range map[string]func(kvevents.SubStats) uint64{
			"applied": func(s kvevents.SubStats) uint64 { return s.Applied }, "gap": func(s kvevents.SubStats) uint64 { return s.Gaps },
			"replayed": func(s kvevents.SubStats) uint64 { return s.Replayed }, "dropped": func(s kvevents.SubStats) uint64 { return s.Dropped },
			"bad": func(s kvevents.SubStats) uint64 { return s.Bad },
		} {
			p.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mooncake_proxy_kv_event_batches_total",
				Help:        "KV event batches from a prefill instance: applied, gaps detected, replayed, dropped (duplicate or late), bad (undecodable).",
				ConstLabels: prometheus.Labels{"instance": in.url, "result": result}}, stat(f)))
		}
		p.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mooncake_proxy_kv_event_blocks",
			Help: "Blocks a prefill instance holds, as its KV events say.", ConstLabels: prometheus.Labels{"instance": in.url}},
			func() float64 { return float64(p.events.Blocks(in.url)) }))
	}
}
