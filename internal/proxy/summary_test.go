package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func summaryOf(t *testing.T, url string) SummaryJSON {
	t.Helper()
	resp, err := http.Get(url + "/api/summary")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s SummaryJSON
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /api/summary: %d %v", resp.StatusCode, err)
	}
	return s
}

// TestSummaryPairsAndRequests: /api/summary counts a pair in flight while
// decode answers, then the request by code; an instance without /metrics
// is reported with its scrape error, not left out.
func TestSummaryPairsAndRequests(t *testing.T) {
	pre := newFake(t, true, "P")
	dec := newFake(t, false, "D")
	dec.after = make(chan struct{})
	p, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}})
	done := make(chan int, 1)
	go func() {
		code, _, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"hi","max_tokens":3}`)
		done <- code
	}()
	select {
	case <-dec.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("decode half did not arrive")
	}
	s := summaryOf(t, srv.URL)
	if s.InFlight != 1 || len(s.Pairs) != 1 || s.Pairs[0].InFlight != 1 || s.Pairs[0].Prefill != pre.srv.URL || s.Pairs[0].Decode != dec.srv.URL {
		t.Fatalf("while decode answers: in flight %d, pairs %+v", s.InFlight, s.Pairs)
	}
	close(dec.after)
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("completion: %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("completion did not end")
	}
	s = p.Summary(context.Background())
	if s.Health != "ok" || s.InFlight != 0 || s.Pairs[0].Total != 1 || s.Requests.Total != 1 || s.Requests.OK != 1 || s.Requests.ByCode["200"] != 1 ||
		s.FirstByte.Count != 1 || len(s.FirstByte.Counts) != len(s.FirstByte.Bounds)+1 {
		t.Fatalf("after: %+v", s)
	}
	if len(s.Instances) != 2 || s.Instances[0].Role != RolePrefill || !s.Instances[0].Healthy || s.Instances[1].Role != RoleDecode ||
		s.Instances[1].Scraped || !strings.Contains(s.Instances[1].ScrapeError, "404") {
		t.Fatalf("instances %+v: want both healthy, unscraped with a 404", s.Instances)
	}
	waitfor.Cond(t, 5*time.Second, "prefill half ended", func() bool { return p.Summary(context.Background()).Instances[0].InFlight == 0 })
}

// TestFamiliesHistogram: histograms of several series merge bucket by
// bucket into non-cumulative counts (series with other bounds are left
// out), vLLM's name is read when ours is missing, and values sum the
// samples whose labels match.
func TestFamiliesHistogram(t *testing.T) {
	const text = `# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 2
vllm:time_to_first_token_seconds_bucket{engine="0",le="1"} 5
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 6
vllm:time_to_first_token_seconds_sum{engine="0"} 4
vllm:time_to_first_token_seconds_count{engine="0"} 6
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",le="1"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf"} 2
vllm:time_to_first_token_seconds_sum{engine="1"} 6
vllm:time_to_first_token_seconds_count{engine="1"} 2
vllm:time_to_first_token_seconds_bucket{engine="2",le="0.5"} 7
vllm:time_to_first_token_seconds_bucket{engine="2",le="+Inf"} 7
vllm:time_to_first_token_seconds_sum{engine="2"} 1
vllm:time_to_first_token_seconds_count{engine="2"} 7
# TYPE mooncake_pd_pulls_total counter
mooncake_pd_pulls_total{result="ok"} 3
mooncake_pd_pulls_total{result="failed"} 1
`
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	f := families(fams)
	var h HistogramJSON
	f.addHistogram(&h, "mooncake_engine_time_to_first_token_seconds", "vllm:time_to_first_token_seconds")
	want := []uint64{3, 3, 2}
	if h.Count != 8 || h.Sum != 10 || h.Mean != 10.0/8 || len(h.Bounds) != 2 || h.Bounds[1] != 1 || len(h.Counts) != 3 ||
		h.Counts[0] != want[0] || h.Counts[1] != want[1] || h.Counts[2] != want[2] {
		t.Fatalf("merged %+v, want counts %v of 8 (engine 2's other bounds left out)", h, want)
	}
	if ok, all := f.value(map[string]string{"result": "ok"}, "mooncake_pd_pulls_total"), f.value(nil, "mooncake_pd_pulls_total"); ok != 3 || all != 4 {
		t.Fatalf("pulls ok %v, all %v; want 3, 4", ok, all)
	}
	if v := f.value(nil, "nope"); v != 0 {
		t.Fatalf("missing family = %v", v)
	}
}

// TestHistogramQuantile: quantiles interpolate within the bucket they fall
// in (from 0 below the first bound); a quantile above the last bound is the
// last bound; an empty histogram gives 0.
func TestHistogramQuantile(t *testing.T) {
	h := HistogramJSON{Count: 100, Bounds: []float64{0.01, 0.1, 1}, Counts: []uint64{50, 40, 10, 0}}
	for _, c := range []struct{ q, want float64 }{{0.5, 0.01}, {0.25, 0.005}, {0.7, 0.055}, {0.99, 0.91}, {1, 1}} {
		if got := h.Quantile(c.q); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("q%v = %v, want %v", c.q, got, c.want)
		}
	}
	above := HistogramJSON{Count: 4, Bounds: []float64{0.1, 1}, Counts: []uint64{1, 1, 2}}
	if got := above.Quantile(0.99); got != 1 {
		t.Errorf("q0.99 above the last bound = %v, want 1", got)
	}
	if got := (HistogramJSON{}).Quantile(0.5); got != 0 {
		t.Errorf("empty: %v", got)
	}
}
