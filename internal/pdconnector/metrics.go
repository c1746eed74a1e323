package pdconnector

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	all       []prometheus.Collector
	reg       *prometheus.Registry
	pulls     *prometheus.CounterVec
	loads     *prometheus.CounterVec
	pullBytes prometheus.Counter
	pullSecs  prometheus.Histogram
	pushes    *prometheus.CounterVec
	pushBytes prometheus.Counter
	pushSecs  prometheus.Histogram
	releases  *prometheus.CounterVec
	fences    prometheus.Counter

	auxMismatch prometheus.Counter
	firstToken  *prometheus.CounterVec
}

func (m *metrics) add(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.all = append(m.all, cs...)
}

func newMetrics(c *Connector) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.pulls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mooncake_pd_pulls_total",
		Help: "Decode side: pulls ended, by result (ok, failed, aborted)."}, []string{"result"})
	m.loads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mooncake_pd_kv_loads_total",
		Help: "Decode side: finished remote-prefill requests by how their KV arrived (remote, local, recomputed, failed, aborted)."}, []string{"load"})
	m.pullBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "mooncake_pd_pull_bytes_total", Help: "Decode side: KV bytes received."})
	m.pullSecs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mooncake_pd_pull_seconds",
		Help: "Decode side: time from asking prefill to the last byte.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)})
	m.pushes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mooncake_pd_pushes_total",
		Help: "Prefill side: pull requests answered, by result (done, or the failure code)."}, []string{"result"})
	m.pushBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "mooncake_pd_push_bytes_total", Help: "Prefill side: KV bytes written to decode."})
	m.pushSecs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mooncake_pd_push_seconds",
		Help: "Prefill side: time spent writing one transfer's blocks.", Buckets: prometheus.ExponentialBuckets(0.0002, 2, 18)})
	m.releases = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mooncake_pd_releases_sent_total",
		Help: "Decode side: will-not-pull messages sent to prefill, by result (ok, error)."}, []string{"result"})
	m.fences = prometheus.NewCounter(prometheus.CounterOpts{Name: "mooncake_pd_kv_fences_total",
		Help: "Decode side: pulls that got no answer, after which the prefill's data lanes into this engine were ended before the blocks were reused."})
	m.auxMismatch = prometheus.NewCounter(prometheus.CounterOpts{Name: "mooncake_pd_aux_first_token_mismatch_total",
		Help: "Decode side: requests whose first output token differs from the one prefill sampled (aux data)."})
	m.firstToken = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mooncake_pd_first_token_total",
		Help: "Decode side: finished remote-prefill requests by where their first output token came from (prefill: shipped with the KV; decode: computed here)."}, []string{"source"})
	m.add(m.auxMismatch, m.firstToken)
	m.add(grantCollectors(c.cfg.Grants)...)
	m.add(m.pulls, m.loads, m.pullBytes, m.pullSecs, m.pushes, m.pushBytes, m.pushSecs, m.releases, m.fences)
	for _, r := range []string{FreeDone, FreeReleased, FreeTimeout} {
		r := r
		m.add(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mooncake_pd_freed_total",
			Help: "Prefill side: transfers whose held blocks were freed, by reason.", ConstLabels: prometheus.Labels{"reason": r}},
			func() float64 {
				c.mu.Lock()
				defer c.mu.Unlock()
				return float64(c.prod.Freed(r))
			}))
	}
	m.add(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mooncake_pd_held_requests",
		Help: "Prefill side: finished prefills whose blocks wait for a pull."}, func() float64 { return float64(c.Stats().Held) }))
	m.add(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mooncake_pd_pulls_in_flight",
		Help: "Decode side: pulls queued or running."}, func() float64 { return float64(c.Stats().PullsInFlight) }))
	m.addPoll(c)
	return m
}

// SGLang's KVPoll states, with their codes (Failed 0, Bootstrapping 1,
// WaitingForInput 2, Transferring 3, Success 4).
var pollCodes = map[string]string{"failed": "0", "bootstrapping": "1", "waiting_for_input": "2", "transferring": "3", "success": "4"}

// addPoll exposes transfers by SGLang's poll state: the current ones as
// mooncake_pd_kv_poll_transfers{role,state,code}, the ended ones as
// mooncake_pd_kv_poll_total{role,state,code}.
func (m *metrics) addPoll(c *Connector) {
	gauge := func(role, state string, f func() float64) {
		m.add(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mooncake_pd_kv_poll_transfers",
			Help:        "KV transfers in flight by SGLang poll state (bootstrapping 1, waiting_for_input 2, transferring 3).",
			ConstLabels: prometheus.Labels{"role": role, "state": state, "code": pollCodes[state]}}, f))
	}
	counter := func(role, state string, f func() float64) {
		m.add(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mooncake_pd_kv_poll_total",
			Help:        "KV transfers ended by SGLang poll state (failed 0, success 4).",
			ConstLabels: prometheus.Labels{"role": role, "state": state, "code": pollCodes[state]}}, f))
	}
	prod := func(i int) func() float64 {
		return func() float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			b, w, t := c.prod.Poll()
			return float64([]int{b, w, t}[i])
		}
	}
	// consumer reads f of the consumer core (0 without one).
	consumer := func(f func(*ConsumerCore) float64) func() float64 {
		return func() float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.cons == nil {
				return 0
			}
			return f(c.cons)
		}
	}
	cons := func(i int) func() float64 {
		return consumer(func(k *ConsumerCore) float64 {
			b, t := k.Poll()
			return float64([]int{b, t}[i])
		})
	}
	consCount := func(r string) func() float64 {
		return consumer(func(k *ConsumerCore) float64 { return float64(k.Count(r)) })
	}
	gauge("producer", "bootstrapping", prod(0))
	gauge("producer", "waiting_for_input", prod(1))
	gauge("producer", "transferring", prod(2))
	counter("producer", "success", func() float64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return float64(c.prod.Freed(FreeDone))
	})
	counter("producer", "failed", func() float64 { return float64(c.pushFailed.Load()) })
	gauge("consumer", "bootstrapping", cons(0))
	gauge("consumer", "transferring", cons(1))
	counter("consumer", "success", consCount("ok"))
	counter("consumer", "failed", consCount("failed"))
}
