package proxy

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvcache-go/mooncake/internal/httpjson"
)

// SummaryJSON is the body of GET /api/summary: the proxy's counters, its
// P/D pairs in flight, and each instance's health and load together with
// what its /metrics says (scraped when the summary is asked for, at most
// ScrapeTimeout each, in parallel). The data of the proxy's dashboard page.
type SummaryJSON struct {
	TimeUnixMs    int64          `json:"time_unix_ms"`
	Health        string         `json:"health"` // as /health's status: ok, degraded, unavailable
	Protocol      string         `json:"protocol"`
	PrefillPolicy string         `json:"prefill_policy"`
	DecodePolicy  string         `json:"decode_policy"`
	Requests      RequestsJSON   `json:"requests"`
	InFlight      int64          `json:"in_flight"` // P/D exchanges being answered
	Pairs         []PairJSON     `json:"pairs"`     // by prefill, then decode URL
	Instances     []InstanceJSON `json:"instances"` // prefill first, in configuration order
	Transfer      TransferJSON   `json:"transfer"`
	// TTFT and TPOT merge the decode instances' engine histograms
	// (mooncake_engine_time_to_first_token_seconds and
	// _time_per_output_token_seconds; vLLM's names are read too);
	// FirstByte is the proxy's own time to decode's response headers.
	TTFT      HistogramJSON `json:"ttft"`
	TPOT      HistogramJSON `json:"tpot"`
	FirstByte HistogramJSON `json:"first_byte"`
}

// RequestsJSON counts client requests by answer.
type RequestsJSON struct {
	Total        uint64            `json:"total"`
	OK           uint64            `json:"ok"`            // 2xx
	ClientErrors uint64            `json:"client_errors"` // 4xx and 499 (client gone)
	ServerErrors uint64            `json:"server_errors"` // 5xx
	ByCode       map[string]uint64 `json:"by_code"`
	NoInstance   uint64            `json:"no_instance"` // 503: no healthy instance of a role
	Rejected     uint64            `json:"rejected"`    // 429: every instance at MaxInFlight, or over the TTFT SLO
	Disconnects  uint64            `json:"disconnects"`
}

// PairJSON is a (prefill, decode) pair the proxy has dispatched to.
type PairJSON struct {
	Prefill  string `json:"prefill"`
	Decode   string `json:"decode"`
	InFlight int64  `json:"in_flight"`
	Total    uint64 `json:"total"`
}

// InstanceJSON is one instance: the proxy's view (health, in flight) and,
// when Scraped, its engine's gauges and counters.
type InstanceJSON struct {
	Role          string  `json:"role"`
	URL           string  `json:"url"`
	Bootstrap     string  `json:"bootstrap,omitempty"`
	Healthy       bool    `json:"healthy"`
	InFlight      int64   `json:"in_flight"` // requests the proxy has on it
	EngineID      string  `json:"engine_id,omitempty"`
	Error         string  `json:"error,omitempty"`
	Scraped       bool    `json:"scraped"`
	ScrapeError   string  `json:"scrape_error,omitempty"`
	Running       float64 `json:"running"`
	Waiting       float64 `json:"waiting"`
	KVBlocksUsed  float64 `json:"kv_blocks_used"`
	KVBlocksFree  float64 `json:"kv_blocks_free"`
	PrefixHitRate float64 `json:"prefix_hit_rate"` // the engine's local prefix cache
	Finished      float64 `json:"finished"`        // requests ended, any reason
	PromptTokens  float64 `json:"prompt_tokens"`   // computed by the model
	OutputTokens  float64 `json:"output_tokens"`
	KVTokens      float64 `json:"kv_tokens"`  // prompt tokens from the KV connector
	PullBytes     float64 `json:"pull_bytes"` // decode: KV bytes received
	PushBytes     float64 `json:"push_bytes"` // prefill: KV bytes written
}

// TransferJSON sums the P/D KV transfers of the instances.
type TransferJSON struct {
	PullBytes   float64 `json:"pull_bytes"`   // decode instances: KV bytes received
	PushBytes   float64 `json:"push_bytes"`   // prefill instances: KV bytes written
	Pulls       float64 `json:"pulls"`        // pulls ended ok
	PullSeconds float64 `json:"pull_seconds"` // time spent in pulls
	// GBps is PullBytes / PullSeconds / 1e9: the bandwidth while pulling.
	GBps float64 `json:"gbps"`
	// KVHitRate is KV tokens / (KV tokens + prompt tokens computed) on the
	// decode instances: the share of prompts that arrived with the KV.
	KVHitRate float64 `json:"kv_hit_rate"`
}

// HistogramJSON is a histogram: Counts[i] observations in (Bounds[i-1],
// Bounds[i]], the last one above the last bound (not cumulative).
type HistogramJSON struct {
	Count  uint64    `json:"count"`
	Sum    float64   `json:"sum"`
	Mean   float64   `json:"mean"`
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
}

// Quantile estimates the q-quantile (0 <= q <= 1) by linear interpolation
// within the bucket it falls in, as Prometheus' histogram_quantile: the
// first bucket's lower bound is 0, a quantile above the last bound is the
// last bound; 0 for an empty histogram.
func (h HistogramJSON) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	lower, below := 0.0, 0.0
	for i, n := range h.Counts {
		if i == len(h.Bounds) {
			break // above the last bound
		}
		upper, cum := h.Bounds[i], below+float64(n)
		if cum >= rank && n > 0 {
			return lower + (upper-lower)*(rank-below)/(cum-below)
		}
		lower, below = upper, cum
	}
	return lower
}

// ScrapeTimeout bounds the read of one instance's /metrics for the summary.
const ScrapeTimeout = time.Second

// pairTable counts the exchanges per (prefill, decode) pair. The zero
// value is ready.
type pairTable struct {
	mu sync.Mutex
	m  map[[2]string]*PairJSON
}

// start counts an exchange on the pair; done ends it.
func (t *pairTable) start(pre, dec string) (done func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[[2]string]*PairJSON{}
	}
	p := t.m[[2]string{pre, dec}]
	if p == nil {
		p = &PairJSON{Prefill: pre, Decode: dec}
		t.m[[2]string{pre, dec}] = p
	}
	p.InFlight++
	p.Total++
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		p.InFlight--
	}
}

func (t *pairTable) snapshot() (pairs []PairJSON, inflight int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pairs = make([]PairJSON, 0, len(t.m))
	for _, p := range t.m {
		pairs = append(pairs, *p)
		inflight += p.InFlight
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].Prefill != pairs[j].Prefill {
			return pairs[i].Prefill < pairs[j].Prefill
		}
		return pairs[i].Decode < pairs[j].Decode
	})
	return pairs, inflight
}

// families indexes metric families by name.
type families map[string]*dto.MetricFamily

// first is the first family of names present (ours, then vLLM's).
func (f families) first(names ...string) *dto.MetricFamily {
	for _, n := range names {
		if mf := f[n]; mf != nil {
			return mf
		}
	}
	return nil
}

// value sums the samples of the first family of names present whose
// labels include match (a counter, gauge or untyped value).
func (f families) value(match map[string]string, names ...string) float64 {
	mf := f.first(names...)
	if mf == nil {
		return 0
	}
	var v float64
	for _, m := range mf.GetMetric() {
		if !labelsMatch(m, match) {
			continue
		}
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Untyped != nil:
			v += m.Untyped.GetValue()
		}
	}
	return v
}

func labelsMatch(m *dto.Metric, match map[string]string) bool {
	for k, want := range match {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == want {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// addHistogram merges the histograms of the first family of names present
// into h (bucket bounds must agree; samples with other bounds are left out).
func (f families) addHistogram(h *HistogramJSON, names ...string) {
	mf := f.first(names...)
	if mf == nil {
		return
	}
	for _, m := range mf.GetMetric() {
		ph := m.GetHistogram()
		if ph == nil {
			continue
		}
		var bounds []float64
		var cum []uint64
		for _, b := range ph.GetBucket() {
			if math.IsInf(b.GetUpperBound(), 1) {
				continue
			}
			bounds = append(bounds, b.GetUpperBound())
			cum = append(cum, b.GetCumulativeCount())
		}
		if h.Bounds == nil {
			h.Bounds, h.Counts = bounds, make([]uint64, len(bounds)+1)
		} else if !slices.Equal(h.Bounds, bounds) {
			continue
		}
		prev := uint64(0)
		for i, c := range cum {
			h.Counts[i] += c - prev
			prev = c
		}
		h.Counts[len(bounds)] += ph.GetSampleCount() - prev
		h.Count += ph.GetSampleCount()
		h.Sum += ph.GetSampleSum()
	}
	if h.Count > 0 {
		h.Mean = h.Sum / float64(h.Count)
	}
}

// scrape reads an instance's /metrics.
func (p *Proxy) scrape(ctx context.Context, in *instance) (families, error) {
	ctx, cancel := context.WithTimeout(ctx, ScrapeTimeout)
	defer cancel()
	b, err := p.get(ctx, in.url+"/metrics", 16<<20)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", in.url, err)
	}
	return fams, nil
}

// Summary scrapes every instance (in parallel, ScrapeTimeout each) and
// returns the proxy's state at a glance.
func (p *Proxy) Summary(ctx context.Context) SummaryJSON {
	all := append(append([]*instance{}, p.prefill...), p.decode...)
	scraped := make([]families, len(all))
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, in := range all {
		wg.Go(func() { scraped[i], errs[i] = p.scrape(ctx, in) })
	}
	own := families{}
	if mfs, err := p.reg.Gather(); err == nil {
		for _, mf := range mfs {
			own[mf.GetName()] = mf
		}
	}
	wg.Wait()

	s := SummaryJSON{TimeUnixMs: p.cfg.Clock.Now().UnixMilli(), Health: p.health(), Protocol: p.cfg.Protocol,
		PrefillPolicy: p.cfg.PrefillPolicy, DecodePolicy: p.cfg.DecodePolicy}
	s.Pairs, s.InFlight = p.pairs.snapshot()
	s.Requests = requestsJSON(own)
	own.addHistogram(&s.FirstByte, "mooncake_proxy_decode_first_byte_seconds")
	var kvTokens, computed float64
	for i, in := range all {
		h, eid, lastErr := in.snapshot()
		ij := InstanceJSON{Role: in.role, URL: in.url, Bootstrap: in.bootstrap, Healthy: h, InFlight: in.inflight.Load(),
			EngineID: eid, Error: lastErr}
		if errs[i] != nil {
			ij.ScrapeError = errs[i].Error()
		} else {
			f := scraped[i]
			ij.Scraped = true
			ij.Running = f.value(nil, "mooncake_engine_requests_running", "vllm:num_requests_running")
			ij.Waiting = f.value(nil, "mooncake_engine_requests_waiting", "vllm:num_requests_waiting")
			ij.KVBlocksUsed = f.value(nil, "mooncake_engine_kv_blocks_used")
			ij.KVBlocksFree = f.value(nil, "mooncake_engine_kv_blocks_free")
			ij.PrefixHitRate = f.value(nil, "mooncake_engine_prefix_cache_hit_rate")
			ij.Finished = f.value(nil, "mooncake_engine_requests_total", "vllm:request_success_total")
			ij.PromptTokens = f.value(nil, "mooncake_engine_prompt_tokens_computed_total")
			ij.OutputTokens = f.value(nil, "mooncake_engine_generation_tokens_total", "vllm:generation_tokens_total")
			ij.KVTokens = f.value(nil, "mooncake_engine_external_tokens_total")
			ij.PullBytes = f.value(nil, "mooncake_pd_pull_bytes_total")
			ij.PushBytes = f.value(nil, "mooncake_pd_push_bytes_total")
			s.Transfer.PullBytes += ij.PullBytes
			s.Transfer.PushBytes += ij.PushBytes
			if in.role == RoleDecode {
				s.Transfer.Pulls += f.value(map[string]string{"result": "ok"}, "mooncake_pd_pulls_total")
				if mf := f.first("mooncake_pd_pull_seconds"); mf != nil {
					for _, m := range mf.GetMetric() {
						s.Transfer.PullSeconds += m.GetHistogram().GetSampleSum()
					}
				}
				kvTokens += ij.KVTokens
				computed += ij.PromptTokens
				f.addHistogram(&s.TTFT, "mooncake_engine_time_to_first_token_seconds", "vllm:time_to_first_token_seconds")
				f.addHistogram(&s.TPOT, "mooncake_engine_time_per_output_token_seconds", "vllm:time_per_output_token_seconds")
			}
		}
		s.Instances = append(s.Instances, ij)
	}
	if s.Transfer.PullSeconds > 0 {
		s.Transfer.GBps = s.Transfer.PullBytes / s.Transfer.PullSeconds / 1e9
	}
	if kvTokens+computed > 0 {
		s.Transfer.KVHitRate = kvTokens / (kvTokens + computed)
	}
	return s
}

// requestsJSON reads the proxy's request counters.
func requestsJSON(own families) RequestsJSON {
	r := RequestsJSON{ByCode: map[string]uint64{}}
	if mf := own["mooncake_proxy_requests_total"]; mf != nil {
		for _, m := range mf.GetMetric() {
			n := uint64(m.GetCounter().GetValue())
			code := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" {
					code = l.GetValue()
				}
			}
			r.Total += n
			r.ByCode[code] += n
			switch {
			case strings.HasPrefix(code, "2"):
				r.OK += n
			case strings.HasPrefix(code, "4"):
				r.ClientErrors += n
			case strings.HasPrefix(code, "5"):
				r.ServerErrors += n
			}
		}
	}
	r.NoInstance = uint64(own.value(nil, "mooncake_proxy_no_instance_total"))
	r.Rejected = uint64(own.value(nil, "mooncake_proxy_rejected_total") + own.value(nil, "mooncake_proxy_ttft_slo_rejected_total"))
	r.Disconnects = uint64(own.value(nil, "mooncake_proxy_client_disconnects_total"))
	return r
}

func (p *Proxy) serveSummary(w http.ResponseWriter, r *http.Request) {
	httpjson.Write(w, http.StatusOK, p.Summary(r.Context()))
}
