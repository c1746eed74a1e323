package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
)

// Default addresses `mooncake status` asks when given neither flag
// (variables for the tests).
var (
	defaultMasterAdmin = "127.0.0.1:9003"
	defaultProxy       = "127.0.0.1:8000"
)

func newStatusCmd() *cobra.Command {
	var (
		masterFlag, proxyFlag string
		asJSON                bool
		timeout               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Summarise a running cluster: the store master's pool and the proxy's instances",
		Long: `Read the store master's admin HTTP API (/metrics, /get_all_segments; /role under --ha)
and the proxy's /health and /metrics, plus each instance's /metrics, and print one summary:
the master's role, pool capacity and use, objects, evictions and every segment; the proxy's
instances with health, load and KV cache, requests in flight, answers by status, and TTFT,
TPOT and prefix-cache hit rate from the engines.

--master is the master's ADMIN address (its --http-port, 9003 by default, not the gRPC port)
as HOST:PORT or a URL; --proxy the proxy's address. Given neither, both defaults are asked
(` + defaultMasterAdmin + `, ` + defaultProxy + `) and what answers is shown. An endpoint that does not answer
within --timeout is reported on stderr and the command exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			explicit := masterFlag != "" || proxyFlag != ""
			if !explicit {
				masterFlag, proxyFlag = defaultMasterAdmin, defaultProxy
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			st := collectStatus(ctx, &http.Client{}, baseURL(masterFlag), baseURL(proxyFlag))
			var failed []string
			if st.Master != nil && st.Master.Error != "" {
				failed = append(failed, "master "+st.Master.URL)
			}
			if st.Proxy != nil && st.Proxy.Error != "" {
				failed = append(failed, "proxy "+st.Proxy.URL)
			}
			if !explicit && len(failed) == 1 { // one default answered: the other role does not run here
				fmt.Fprintf(cmd.ErrOrStderr(), "note: no answer from the %s (not running here? point --master/--proxy at it)\n", failed[0])
				if st.Master.Error != "" {
					st.Master = nil
				} else {
					st.Proxy = nil
				}
				failed = nil
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(st); err != nil {
					return err
				}
			} else {
				printStatus(out, st)
			}
			if len(failed) == 0 {
				return nil
			}
			return &ExitError{Code: 1, Err: fmt.Errorf("no answer from the %s", strings.Join(failed, " and the "))}
		},
	}
	f := cmd.Flags()
	f.StringVar(&masterFlag, "master", "", "master admin HTTP address HOST:PORT or URL (its --http-port; default "+defaultMasterAdmin+" when neither flag is given)")
	f.StringVar(&proxyFlag, "proxy", "", "proxy address HOST:PORT or URL (default "+defaultProxy+" when neither flag is given)")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	f.DurationVar(&timeout, "timeout", 3*time.Second, "deadline for all the requests")
	return cmd
}

// baseURL turns "host:port" or a URL into a URL without a trailing slash
// ("" stays "": that role is not asked).
func baseURL(s string) string {
	if s == "" {
		return ""
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	return strings.TrimRight(s, "/")
}

// clusterStatus is what `mooncake status --json` prints.
type clusterStatus struct {
	Master *masterStatus `json:"master,omitempty"`
	Proxy  *proxyStatus  `json:"proxy,omitempty"`
}

type masterStatus struct {
	URL    string `json:"url"`
	Error  string `json:"error,omitempty"`  // unreachable or not a master
	Role   string `json:"role,omitempty"`   // --ha: leader or follower
	Leader string `json:"leader,omitempty"` // --ha: the leader's gRPC address
	// The rest is empty on an HA follower (it serves no store metrics).
	Objects         uint64          `json:"objects"`
	PendingPuts     uint64          `json:"pending_puts"`
	Clients         uint64          `json:"clients"`
	Memory          memoryTier      `json:"memory"`
	DiskObjects     uint64          `json:"disk_objects"` // keys held only on a disk tier
	Puts            uint64          `json:"puts"`
	Gets            uint64          `json:"gets"`
	GetMisses       uint64          `json:"get_misses"`
	DiskGets        uint64          `json:"disk_gets"`
	Removes         uint64          `json:"removes"`
	Evictions       uint64          `json:"evictions"`
	EvictedBytes    uint64          `json:"evicted_bytes"`
	LeaseRejections uint64          `json:"lease_rejections"`
	ClientsDropped  uint64          `json:"clients_dropped"`
	Segments        []segmentStatus `json:"segments"`
}

type memoryTier struct {
	Segments int    `json:"segments"`
	Capacity uint64 `json:"capacity"`
	Used     uint64 `json:"used"`
}

type segmentStatus struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	Capacity uint64 `json:"capacity"`
	Used     uint64 `json:"used"`
	Objects  uint64 `json:"objects"` // replicas on the segment
	Draining bool   `json:"draining"`
}

type proxyStatus struct {
	URL       string           `json:"url"`
	Error     string           `json:"error,omitempty"`
	Health    string           `json:"health,omitempty"` // ok, degraded, unavailable
	InFlight  int64            `json:"in_flight"`        // P/D requests being answered (decode halves)
	Requests  map[string]int64 `json:"requests"`         // answers by HTTP status
	FirstByte quantiles        `json:"first_byte"`       // the proxy's time to decode's headers
	// Merged over the decode instances' engine histograms (the decode
	// engine emits the tokens the client sees).
	TTFT      quantiles        `json:"ttft"`
	TPOT      quantiles        `json:"tpot"`
	HitRate   float64          `json:"prefix_hit_rate"` // mean over the instances that report it
	Instances []instanceStatus `json:"instances"`
}

type instanceStatus struct {
	Role        string  `json:"role"`
	URL         string  `json:"url"`
	Healthy     bool    `json:"healthy"`
	InFlight    int64   `json:"in_flight"`
	Error       string  `json:"error,omitempty"` // the proxy's last health-check error
	ScrapeError string  `json:"scrape_error,omitempty"`
	Running     float64 `json:"running"`
	Waiting     float64 `json:"waiting"`
	KVUsed      float64 `json:"kv_blocks_used"`
	KVFree      float64 `json:"kv_blocks_free"`
	HitRate     float64 `json:"prefix_hit_rate"`
	Finished    float64 `json:"finished"`

	ttft, tpot *dto.Histogram
}

// quantiles of a latency histogram, in seconds (estimated by linear
// interpolation inside the bucket, as Prometheus' histogram_quantile).
type quantiles struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50_s"`
	P99   float64 `json:"p99_s"`
}

// collectStatus asks the master and the proxy (either may be ""), in
// parallel, until ctx ends.
func collectStatus(ctx context.Context, hc *http.Client, masterURL, proxyURL string) clusterStatus {
	var st clusterStatus
	var wg sync.WaitGroup
	if masterURL != "" {
		st.Master = &masterStatus{URL: masterURL}
		wg.Go(func() { fillMaster(ctx, hc, st.Master) })
	}
	if proxyURL != "" {
		st.Proxy = &proxyStatus{URL: proxyURL}
		wg.Go(func() { fillProxy(ctx, hc, st.Proxy) })
	}
	wg.Wait()
	return st
}

// errHTTP is a non-2xx answer; errNotJSON a body that is not the JSON
// expected.
var (
	errHTTP    = errors.New("HTTP error")
	errNotJSON = errors.New("not the expected JSON")
)

func get(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("GET %s: no answer in time: %w", url, ctx.Err())
		}
		return nil, fmt.Errorf("GET %s: %w", url, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		return b, fmt.Errorf("GET %s: %w %d: %s", url, errHTTP, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return b, nil
}

func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	b, err := get(ctx, hc, url)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w: %v", url, errNotJSON, err)
	}
	return nil
}

func getMetrics(ctx context.Context, hc *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	b, err := get(ctx, hc, url)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		return nil, fmt.Errorf("GET %s: not Prometheus text: %w", url, err)
	}
	return fams, nil
}

// value is the sum of the family's samples (gauge, counter or untyped); 0
// when absent.
func value(fams map[string]*dto.MetricFamily, name string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var v float64
	for _, m := range f.Metric {
		switch {
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Untyped != nil:
			v += m.Untyped.GetValue()
		}
	}
	return v
}

func fillMaster(ctx context.Context, hc *http.Client, ms *masterStatus) {
	var role struct {
		Role string `json:"role"`
		Addr string `json:"addr"`
	}
	err := getJSON(ctx, hc, ms.URL+"/role", &role)
	if err != nil && !errors.Is(err, errHTTP) && !errors.Is(err, errNotJSON) { // no HTTP answer at all
		ms.Error = err.Error()
		if grpcPort(ctx, ms.URL) {
			ms.Error = ms.URL + " speaks gRPC, not HTTP: give the master's admin port (its --http-port, 9003 by default), not its --port"
		}
		return
	}
	if err == nil && role.Role != "" { // only HA candidates have /role
		ms.Role = role.Role
		var ld struct {
			Addr string `json:"addr"`
		}
		if getJSON(ctx, hc, ms.URL+"/leader", &ld) == nil {
			ms.Leader = ld.Addr
		}
		if role.Role != "leader" {
			return
		}
	}
	fams, err := getMetrics(ctx, hc, ms.URL+"/metrics")
	if err != nil {
		ms.Error = err.Error()
		return
	}
	if fams["mooncake_master_objects"] == nil {
		ms.Error = ms.URL + " is not a mooncake master admin port (no mooncake_master_objects in /metrics; is it the gRPC port? the admin port is --http-port, 9003)"
		return
	}
	u := func(name string) uint64 { return uint64(value(fams, "mooncake_master_"+name)) }
	ms.Objects, ms.PendingPuts, ms.Clients = u("objects"), u("pending_puts"), u("clients")
	ms.Memory = memoryTier{Segments: int(u("segments")), Capacity: u("capacity_bytes"), Used: u("used_bytes")}
	ms.DiskObjects, ms.DiskGets = u("disk_objects"), u("disk_gets_total")
	ms.Puts, ms.Gets, ms.GetMisses, ms.Removes = u("puts_total"), u("gets_total"), u("get_misses_total"), u("removes_total")
	ms.Evictions, ms.EvictedBytes = u("evictions_total"), u("evicted_bytes_total")
	ms.LeaseRejections, ms.ClientsDropped = u("lease_rejections_total"), u("clients_dropped_total")
	var segs []segmentStatus
	if err := getJSON(ctx, hc, ms.URL+"/get_all_segments", &segs); err != nil {
		ms.Error = err.Error()
		return
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].Name < segs[j].Name })
	ms.Segments = segs
}

// grpcPort reports whether the server at url speaks first with an HTTP/2
// SETTINGS frame, as a gRPC server does (an HTTP/1 server waits for the
// request): the master's --port given where its admin port belongs.
func grpcPort(ctx context.Context, url string) bool {
	host := strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://")
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host = host[:i]
	}
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(d)
	}
	var hdr [9]byte // frame header: length (3), type (1), flags (1), stream (4)
	_, err = io.ReadFull(c, hdr[:])
	return err == nil && hdr[3] == 0x4 // SETTINGS
}

func fillProxy(ctx context.Context, hc *http.Client, ps *proxyStatus) {
	var health struct {
		Status    string `json:"status"`
		Instances []struct {
			Role     string `json:"role"`
			URL      string `json:"url"`
			Healthy  bool   `json:"healthy"`
			InFlight int64  `json:"inflight"`
			Error    string `json:"error"`
		} `json:"instances"`
	}
	b, err := get(ctx, hc, ps.URL+"/health")
	if err != nil && !errors.Is(err, errHTTP) { // 503 still carries the instances
		ps.Error = err.Error()
		return
	}
	if jerr := json.Unmarshal(b, &health); jerr != nil || health.Status == "" {
		ps.Error = ps.URL + " is not a mooncake proxy (its /health is not the proxy's JSON)"
		return
	}
	ps.Health = health.Status
	fams, err := getMetrics(ctx, hc, ps.URL+"/metrics")
	if err != nil {
		ps.Error = err.Error()
		return
	}
	ps.Requests = map[string]int64{}
	if f := fams["mooncake_proxy_requests_total"]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "code" {
					ps.Requests[l.GetValue()] += int64(m.Counter.GetValue())
				}
			}
		}
	}
	if f := fams["mooncake_proxy_decode_first_byte_seconds"]; f != nil && len(f.Metric) > 0 {
		ps.FirstByte = histQuantiles(f.Metric[0].Histogram)
	}
	ps.Instances = make([]instanceStatus, len(health.Instances))
	var wg sync.WaitGroup
	for i, in := range health.Instances {
		is := &ps.Instances[i]
		*is = instanceStatus{Role: in.Role, URL: in.URL, Healthy: in.Healthy, InFlight: in.InFlight, Error: in.Error}
		if in.Role == "decode" {
			ps.InFlight += in.InFlight
		}
		wg.Go(func() { fillInstance(ctx, hc, is) })
	}
	wg.Wait()
	var ttft, tpot []*dto.Histogram
	var hits float64
	var nHits int
	for _, is := range ps.Instances {
		if is.ScrapeError != "" {
			continue
		}
		hits += is.HitRate
		nHits++
		if is.Role == "decode" {
			ttft, tpot = append(ttft, is.ttft), append(tpot, is.tpot)
		}
	}
	ps.TTFT, ps.TPOT = histQuantiles(mergeHist(ttft)), histQuantiles(mergeHist(tpot))
	if nHits > 0 {
		ps.HitRate = hits / float64(nHits)
	}
}

func fillInstance(ctx context.Context, hc *http.Client, is *instanceStatus) {
	fams, err := getMetrics(ctx, hc, baseURL(is.URL)+"/metrics")
	if err != nil {
		is.ScrapeError = err.Error()
		return
	}
	e := func(name string) float64 { return value(fams, "mooncake_engine_"+name) }
	is.Running, is.Waiting = e("requests_running"), e("requests_waiting")
	is.KVUsed, is.KVFree, is.HitRate = e("kv_blocks_used"), e("kv_blocks_free"), e("prefix_cache_hit_rate")
	is.Finished = e("requests_total")
	hist := func(name string) *dto.Histogram {
		if f := fams[name]; f != nil && len(f.Metric) > 0 {
			return f.Metric[0].Histogram
		}
		return nil
	}
	is.ttft, is.tpot = hist("mooncake_engine_time_to_first_token_seconds"), hist("mooncake_engine_time_per_output_token_seconds")
}

// mergeHist adds histograms with the same buckets (nil ones are skipped).
func mergeHist(hs []*dto.Histogram) *dto.Histogram {
	var out *dto.Histogram
	for _, h := range hs {
		if h == nil {
			continue
		}
		if out == nil {
			out = &dto.Histogram{SampleCount: new(uint64), SampleSum: new(float64)}
			for _, b := range h.Bucket {
				out.Bucket = append(out.Bucket, &dto.Bucket{UpperBound: new(b.GetUpperBound()), CumulativeCount: new(uint64)})
			}
		}
		*out.SampleCount += h.GetSampleCount()
		*out.SampleSum += h.GetSampleSum()
		for i, b := range h.Bucket {
			if i < len(out.Bucket) && out.Bucket[i].GetUpperBound() == b.GetUpperBound() {
				*out.Bucket[i].CumulativeCount += b.GetCumulativeCount()
			}
		}
	}
	return out
}

func histQuantiles(h *dto.Histogram) quantiles {
	if h == nil || h.GetSampleCount() == 0 {
		return quantiles{}
	}
	return quantiles{Count: h.GetSampleCount(), P50: quantile(h, 0.5), P99: quantile(h, 0.99)}
}

// quantile estimates the q-quantile of a cumulative histogram by linear
// interpolation within the bucket it falls in (the lower bound of the first
// bucket is 0; a quantile in the +Inf bucket is the largest finite bound).
func quantile(h *dto.Histogram, q float64) float64 {
	total := float64(h.GetSampleCount())
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range h.Bucket {
		upper, cum := b.GetUpperBound(), float64(b.GetCumulativeCount())
		if cum >= rank {
			if math.IsInf(upper, 1) {
				return lower
			}
			if cum == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(cum-below)
		}
		lower, below = upper, cum
	}
	return lower
}

// printStatus renders the summary for a terminal.
func printStatus(w io.Writer, st clusterStatus) {
	if m := st.Master; m != nil {
		printMaster(w, m)
	}
	if p := st.Proxy; p != nil {
		if st.Master != nil {
			fmt.Fprintln(w)
		}
		printProxy(w, p)
	}
}

func pct(used, capacity uint64) string {
	if capacity == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(used)/float64(capacity))
}

func printMaster(w io.Writer, m *masterStatus) {
	head := "master " + m.URL
	if m.Role != "" {
		head += fmt.Sprintf("  (HA %s, leader %s)", m.Role, orDash(m.Leader))
	}
	fmt.Fprintln(w, head)
	if m.Error != "" {
		fmt.Fprintf(w, "  unreachable: %s\n", m.Error)
		return
	}
	if m.Role != "" && m.Role != "leader" {
		fmt.Fprintln(w, "  a follower: ask the leader's admin port for the pool")
		return
	}
	fmt.Fprintf(w, "  memory  %s of %s used (%s) on %d segment(s); %d client(s)\n",
		formatSize(m.Memory.Used), formatSize(m.Memory.Capacity), pct(m.Memory.Used, m.Memory.Capacity), m.Memory.Segments, m.Clients)
	fmt.Fprintf(w, "  disk    %d object(s) only on a disk tier, %d read(s) from disk\n", m.DiskObjects, m.DiskGets)
	fmt.Fprintf(w, "  objects %d (+%d puts in progress)  puts %d  gets %d (misses %d)  removes %d\n",
		m.Objects, m.PendingPuts, m.Puts, m.Gets, m.GetMisses, m.Removes)
	fmt.Fprintf(w, "  evictions %d (%s)  lease rejections %d  clients dropped %d\n",
		m.Evictions, formatSize(m.EvictedBytes), m.LeaseRejections, m.ClientsDropped)
	if len(m.Segments) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SEGMENT\tENDPOINT\tCAPACITY\tUSED\t\tREPLICAS")
	for _, s := range m.Segments {
		state := ""
		if s.Draining {
			state = "\tdraining"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d%s\n", displayKey(s.Name), s.Endpoint, formatSize(s.Capacity), formatSize(s.Used), pct(s.Used, s.Capacity), s.Objects, state)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ms3(s float64) string { return fmt.Sprintf("%.1f ms", s*1000) }

func printProxy(w io.Writer, p *proxyStatus) {
	fmt.Fprintf(w, "proxy %s", p.URL)
	if p.Error != "" {
		fmt.Fprintf(w, "\n  unreachable: %s\n", p.Error)
		return
	}
	fmt.Fprintf(w, "  (%s)\n", p.Health)
	codes := make([]string, 0, len(p.Requests))
	var total int64
	for c, n := range p.Requests {
		codes = append(codes, fmt.Sprintf("%s: %d", c, n))
		total += n
	}
	slices.Sort(codes)
	fmt.Fprintf(w, "  requests %d answered (%s), %d in flight\n", total, orDash(strings.Join(codes, ", ")), p.InFlight)
	lat := func(name string, q quantiles) string {
		if q.Count == 0 {
			return name + " -"
		}
		return fmt.Sprintf("%s p50 %s p99 %s (n=%d)", name, ms3(q.P50), ms3(q.P99), q.Count)
	}
	fmt.Fprintf(w, "  %s  %s\n", lat("TTFT", p.TTFT), lat("TPOT", p.TPOT))
	fmt.Fprintf(w, "  %s  prefix-cache hit rate %.1f%%\n", lat("first byte", p.FirstByte), 100*p.HitRate)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ROLE\tINSTANCE\tHEALTH\tIN FLIGHT\tRUNNING\tWAITING\tKV BLOCKS USED\tHIT RATE")
	for _, in := range p.Instances {
		health := "ok"
		if !in.Healthy {
			health = "DOWN"
			if in.Error != "" {
				health += ": " + in.Error
			}
		}
		if in.ScrapeError != "" {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t-\t-\t-\t-\n", in.Role, in.URL, health, in.InFlight)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%.0f\t%.0f\t%.0f/%.0f\t%.1f%%\n", in.Role, in.URL, health, in.InFlight,
			in.Running, in.Waiting, in.KVUsed, in.KVUsed+in.KVFree, 100*in.HitRate)
	}
	tw.Flush()
}
