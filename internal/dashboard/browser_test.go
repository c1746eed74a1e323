package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	mmodel "github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/proxy"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// TestMasterDashboard loads the master's page in headless Chromium against
// a master with two storage nodes and some objects, and checks every
// number it shows against /api/summary and /get_all_segments.
func TestMasterDashboard(t *testing.T) {
	b := startBrowser(t)
	base := startStore(t)

	// Navigating to / lands on the dashboard.
	ctx := b.step(t, 20*time.Second)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil || !strings.HasSuffix(loc, "/dashboard/") {
		t.Fatalf("/ led to %q (%v), want the dashboard", loc, err)
	}
	waitRendered(t, ctx)

	before := getJSON[masterserver.SummaryJSON](t, base+"/api/summary")
	segsBefore := getJSON[[]map[string]any](t, base+"/get_all_segments")
	refresh(t, ctx)
	values := readShown(t, ctx)
	rows := readRows(t, ctx, "segment-row", "name")
	after := getJSON[masterserver.SummaryJSON](t, base+"/api/summary")
	segsAfter := getJSON[[]map[string]any](t, base+"/get_all_segments")
	b.screenshot(t, ctx, "master-dashboard.png")

	// The cluster is as the test made it.
	if after.Keys != 10 || after.Objects != 10 || after.Replicas != 20 || after.Segments != 2 || after.Counters.Gets != 3 ||
		after.Counters.Removes != 2 || after.Memory.Used == 0 {
		t.Fatalf("summary %+v, want 10 keys with 2 replicas each on 2 segments, 3 gets, 2 removes", after)
	}
	fields := map[string]func(s masterserver.SummaryJSON) float64{
		"keys":                       func(s masterserver.SummaryJSON) float64 { return float64(s.Keys) },
		"objects":                    func(s masterserver.SummaryJSON) float64 { return float64(s.Objects) },
		"replicas":                   func(s masterserver.SummaryJSON) float64 { return float64(s.Replicas) },
		"replica-bytes":              func(s masterserver.SummaryJSON) float64 { return float64(s.Memory.Bytes) },
		"pending-puts":               func(s masterserver.SummaryJSON) float64 { return float64(s.PendingPuts) },
		"leased":                     func(s masterserver.SummaryJSON) float64 { return float64(s.Leased) },
		"evictions":                  func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.Evictions) },
		"evicted-bytes":              func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.EvictedBytes) },
		"segments":                   func(s masterserver.SummaryJSON) float64 { return float64(s.Segments) },
		"clients":                    func(s masterserver.SummaryJSON) float64 { return float64(s.Clients) },
		"hard-pinned":                func(s masterserver.SummaryJSON) float64 { return float64(s.HardPinned) },
		"soft-pinned":                func(s masterserver.SummaryJSON) float64 { return float64(s.SoftPinned) },
		"memory-util":                func(s masterserver.SummaryJSON) float64 { return float64(s.Memory.Used) / float64(s.Memory.Capacity) },
		"memory-used":                func(s masterserver.SummaryJSON) float64 { return float64(s.Memory.Used) },
		"memory-capacity":            func(s masterserver.SummaryJSON) float64 { return float64(s.Memory.Capacity) },
		"memory-objects":             func(s masterserver.SummaryJSON) float64 { return float64(s.Memory.Objects) },
		"high-watermark":             func(s masterserver.SummaryJSON) float64 { return s.Config.HighWatermark },
		"disk-objects":               func(s masterserver.SummaryJSON) float64 { return float64(s.Disk.Objects) },
		"disk-bytes":                 func(s masterserver.SummaryJSON) float64 { return float64(s.Disk.Bytes) },
		"disk-gets":                  func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.DiskGets) },
		"puts":                       func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.Puts) },
		"put-starts":                 func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.PutStarts) },
		"put-revokes":                func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.PutRevokes) },
		"puts-timed-out":             func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.PutsTimedOut) },
		"gets":                       func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.Gets) },
		"get-misses":                 func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.GetMisses) },
		"removes":                    func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.Removes) },
		"eviction-runs":              func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.EvictionRuns) },
		"evictions-2":                func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.Evictions) },
		"lease-rejections":           func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.LeaseRejections) },
		"clients-dropped":            func(s masterserver.SummaryJSON) float64 { return float64(s.Counters.ClientsDropped) },
		"utilisation-first-eviction": func(s masterserver.SummaryJSON) float64 { return s.Utilisation },
	}
	for id, f := range fields {
		checkShown(t, values, id, f(before), f(after))
	}
	// The segment table matches /get_all_segments.
	if len(rows) != len(segsAfter) {
		t.Fatalf("page shows %d segments, /get_all_segments %d", len(rows), len(segsAfter))
	}
	for i, seg := range segsAfter {
		name := seg["name"].(string)
		row, ok := rows[name]
		if !ok {
			t.Fatalf("segment %q not on the page (rows %v)", name, rows)
		}
		for _, f := range []string{"used", "capacity", "objects"} {
			checkShown(t, row, f, segsBefore[i][f].(float64), seg[f].(float64))
		}
	}
}

// TestProxyDashboard loads the proxy's page in headless Chromium against a
// local P/D cluster (one prefill, one decode instance) after a few
// completions, and checks the numbers it shows against /api/summary, whose
// request count is checked against the proxy's Prometheus /metrics.
func TestProxyDashboard(t *testing.T) {
	b := startBrowser(t)
	m, err := mmodel.NewBuiltin("tiny", 1)
	if err != nil {
		t.Fatal(err)
	}
	upCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Up(upCtx, cluster.Config{Model: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	const requests = 4
	for i := range requests {
		body := fmt.Sprintf(`{"prompt": %q, "max_tokens": 6, "temperature": 0, "ignore_eos": true}`,
			strings.Repeat("Mooncake moves KV caches between prefill and decode. ", i+1))
		resp, err := http.Post(c.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body) // a body left unread is a client gone (499)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("completion %d: %s %v", i, resp.Status, err)
		}
	}
	waitfor.Cond(t, 20*time.Second, "prefill halves ended", func() bool {
		s := getJSON[proxy.SummaryJSON](t, c.URL+"/api/summary")
		for _, in := range s.Instances {
			if in.InFlight != 0 {
				return false
			}
		}
		return s.InFlight == 0
	})

	ctx := b.step(t, 20*time.Second)
	if err := chromedp.Do(ctx, chromedp.Navigate(c.URL+"/")); err != nil {
		t.Fatal(err)
	}
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || !strings.HasSuffix(loc, "/dashboard/") {
		t.Fatalf("/ led to %q (%v), want the dashboard", loc, err)
	}
	waitRendered(t, ctx)

	before := getJSON[proxy.SummaryJSON](t, c.URL+"/api/summary")
	refresh(t, ctx)
	values := readShown(t, ctx)
	instances := readRows(t, ctx, "instance-row", "url")
	pairs := readRows(t, ctx, "pair-row", "decode")
	after := getJSON[proxy.SummaryJSON](t, c.URL+"/api/summary")
	b.screenshot(t, ctx, "proxy-dashboard.png")

	if after.Requests.Total != requests || after.Requests.OK != requests || after.Transfer.Pulls != requests ||
		after.Transfer.PullBytes == 0 || after.TTFT.Count != requests || after.FirstByte.Count != requests || len(after.Pairs) != 1 ||
		after.Pairs[0].Total != requests || len(after.Instances) != 2 {
		t.Fatalf("summary %+v, want %d requests answered by one pair with KV pulled", after, requests)
	}
	if n := promCounter(t, c.URL, "mooncake_proxy_requests_total"); n != float64(after.Requests.Total) {
		t.Fatalf("/metrics counts %v requests, /api/summary %d", n, after.Requests.Total)
	}
	healthy := func(s proxy.SummaryJSON) float64 {
		n := 0
		for _, in := range s.Instances {
			if in.Healthy {
				n++
			}
		}
		return float64(n)
	}
	fields := map[string]func(s proxy.SummaryJSON) float64{
		"requests":         func(s proxy.SummaryJSON) float64 { return float64(s.Requests.Total) },
		"requests-ok":      func(s proxy.SummaryJSON) float64 { return float64(s.Requests.OK) },
		"requests-errors":  func(s proxy.SummaryJSON) float64 { return float64(s.Requests.ClientErrors + s.Requests.ServerErrors) },
		"requests-4xx":     func(s proxy.SummaryJSON) float64 { return float64(s.Requests.ClientErrors) },
		"requests-5xx":     func(s proxy.SummaryJSON) float64 { return float64(s.Requests.ServerErrors) },
		"in-flight":        func(s proxy.SummaryJSON) float64 { return float64(s.InFlight) },
		"pair-count":       func(s proxy.SummaryJSON) float64 { return float64(len(s.Pairs)) },
		"healthy":          healthy,
		"instances":        func(s proxy.SummaryJSON) float64 { return float64(len(s.Instances)) },
		"transfer-gbps":    func(s proxy.SummaryJSON) float64 { return s.Transfer.GBps },
		"pull-bytes":       func(s proxy.SummaryJSON) float64 { return s.Transfer.PullBytes },
		"pulls":            func(s proxy.SummaryJSON) float64 { return s.Transfer.Pulls },
		"kv-hit-rate":      func(s proxy.SummaryJSON) float64 { return s.Transfer.KVHitRate },
		"no-instance":      func(s proxy.SummaryJSON) float64 { return float64(s.Requests.NoInstance) },
		"rejected":         func(s proxy.SummaryJSON) float64 { return float64(s.Requests.Rejected) },
		"disconnects":      func(s proxy.SummaryJSON) float64 { return float64(s.Requests.Disconnects) },
		"ttft-mean":        func(s proxy.SummaryJSON) float64 { return s.TTFT.Mean },
		"ttft-count":       func(s proxy.SummaryJSON) float64 { return float64(s.TTFT.Count) },
		"tpot-mean":        func(s proxy.SummaryJSON) float64 { return s.TPOT.Mean },
		"tpot-count":       func(s proxy.SummaryJSON) float64 { return float64(s.TPOT.Count) },
		"first-byte-mean":  func(s proxy.SummaryJSON) float64 { return s.FirstByte.Mean },
		"first-byte-count": func(s proxy.SummaryJSON) float64 { return float64(s.FirstByte.Count) },
	}
	for id, f := range fields {
		checkShown(t, values, id, f(before), f(after))
	}
	if len(instances) != len(after.Instances) {
		t.Fatalf("page shows %d instances, summary %d", len(instances), len(after.Instances))
	}
	for i, in := range after.Instances {
		row, ok := instances[in.URL]
		if !ok {
			t.Fatalf("instance %s not on the page", in.URL)
		}
		was := before.Instances[i]
		checkShown(t, row, "in_flight", float64(was.InFlight), float64(in.InFlight))
		checkShown(t, row, "running", was.Running, in.Running)
		checkShown(t, row, "finished", was.Finished, in.Finished)
		checkShown(t, row, "prefix_hit_rate", was.PrefixHitRate, in.PrefixHitRate)
	}
	p := after.Pairs[0]
	checkShown(t, pairs[p.Decode], "total", float64(before.Pairs[0].Total), float64(p.Total))
	checkShown(t, pairs[p.Decode], "in_flight", float64(before.Pairs[0].InFlight), float64(p.InFlight))
}

// startStore runs a master (admin HTTP on loopback) and two storage nodes,
// puts 12 objects with 2 replicas, reads 3 and removes 2; it returns the
// admin base URL.
func startStore(t *testing.T) string {
	t.Helper()
	srv, err := masterserver.Start(masterserver.ServerConfig{Core: master.DefaultConfig(), Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		TickInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 2 {
		n, err := storenode.Start(ctx, storenode.Config{Master: srv.Addr(), SegmentSize: 4 << 20,
			Engine: transfer.Config{Transport: transfer.TransportTCP}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
	}
	eng, err := transfer.Open(ctx, transfer.Config{Transport: transfer.TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	cl, err := store.New(ctx, store.Config{Master: srv.Addr(), Mover: eng, LocalBufferSize: 4 << 20, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	for i := range 12 {
		if err := cl.Put(ctx, fmt.Sprintf("kv/%02d", i), bytes.Repeat([]byte{byte(i)}, (i+1)*8<<10)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := cl.Get(ctx, fmt.Sprintf("kv/%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"kv/10", "kv/11"} {
		if err := cl.Remove(ctx, k, false); err != nil {
			t.Fatal(err)
		}
	}
	return "http://" + srv.HTTPAddr()
}

// browser is headless Chromium driven over CDP.
type browser struct {
	ctx       context.Context // a chromedp context whose browser runs
	artifacts string          // where screenshots go
}

// startBrowser starts headless Chromium for the test. Without a Chromium
// binary the test is skipped, or fails under CI (scripts/deps.sh installs
// Debian's chromium).
func startBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium not found (CI is set): scripts/deps.sh installs Debian's chromium")
		}
		t.Skip("chromium not found: install it (scripts/deps.sh, or apt-get install chromium) to run the dashboard browser test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Headless,
		chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1440, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // waits for the browser process to exit
	})
	// The first Run starts the browser, for the life of bctx: no deadline
	// on it, but a watchdog so that a hung start cannot hang the test.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(bctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting %s: %v", path, err)
		}
	case <-time.After(30 * time.Second):
		cancelBrowser()
		<-started
		t.Fatalf("%s did not start within 30s", path)
	}
	return &browser{ctx: bctx, artifacts: artifactsDir(t)}
}

// step is a context for the next browser actions, ending after d or with the test.
func (b *browser) step(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(b.ctx, d)
	t.Cleanup(cancel)
	return ctx
}

// screenshot saves a full-page PNG of the current page as a test artifact.
func (b *browser) screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	path := filepath.Join(b.artifacts, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

func chromiumPath() string {
	if p := os.Getenv("MOONCAKE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactsDir is $MOONCAKE_TEST_ARTIFACTS, or test-artifacts/ at the
// repository's root, created if missing.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MOONCAKE_TEST_ARTIFACTS")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		root := wd
		for {
			if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
				break
			}
			parent := filepath.Dir(root)
			if parent == root {
				t.Fatalf("no go.mod above %s", wd)
			}
			root = parent
		}
		dir = filepath.Join(root, "test-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// waitRendered waits until the page has rendered the JSON it polls.
func waitRendered(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](
		`Number(document.body.dataset.renders) > 0 && document.querySelector('[data-testid="status"]').textContent === "live"`,
		chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="status"]').textContent`))
		t.Fatalf("page did not render: %v (status %q)", err, status)
	}
}

// refresh makes the page fetch and render once more, so what it shows was
// fetched after the caller's first read of the JSON.
func refresh(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.dashboardRefresh()`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatal(err)
	}
	if status, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="status"]').textContent`)); err != nil || status != "live" {
		t.Fatalf("page status %q (%v)", status, err)
	}
}

// shown is a number as the page shows it: the raw value it keeps in
// data-value and the formatted text.
type shown struct {
	Value float64 `json:"value"`
	Text  string  `json:"text"`
}

// readShown reads every element with a data-testid and a data-value.
func readShown(t *testing.T, ctx context.Context) map[string]shown {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]shown](`Object.fromEntries(
		Array.from(document.querySelectorAll("[data-testid][data-value]"),
			(e) => [e.dataset.testid, {value: Number(e.dataset.value), text: e.textContent}]))`))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readRows reads the table rows data-testid=kind by their data-key
// attribute: each row's cells with data-field and data-value.
func readRows(t *testing.T, ctx context.Context, kind, key string) map[string]map[string]shown {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]map[string]shown](fmt.Sprintf(`Object.fromEntries(
		Array.from(document.querySelectorAll('[data-testid=%q]'), (r) => [r.dataset[%q], Object.fromEntries(
			Array.from(r.querySelectorAll("[data-field][data-value]"),
				(c) => [c.dataset.field, {value: Number(c.dataset.value), text: c.textContent}]))]))`, kind, key)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkShown checks that the page shows id with a value between the JSON's
// before and after the page's fetch, and that its text says that value.
func checkShown(t *testing.T, values map[string]shown, id string, before, after float64) {
	t.Helper()
	s, ok := values[id]
	if !ok {
		t.Errorf("%s: not on the page", id)
		return
	}
	lo, hi := min(before, after), max(before, after)
	eps := 1e-9 * max(1, math.Abs(hi))
	if s.Value < lo-eps || s.Value > hi+eps {
		t.Errorf("%s: page shows %v (%q), the JSON says %v then %v", id, s.Value, s.Text, before, after)
	}
	v, tol, err := parseShown(s.Text)
	if err != nil {
		t.Errorf("%s: %v", id, err)
		return
	}
	if math.Abs(v-s.Value) > tol+eps {
		t.Errorf("%s: text %q says %v, the value is %v", id, s.Text, v, s.Value)
	}
}

var shownRE = regexp.MustCompile(`^(-?[0-9]+)(?:\.([0-9]+))?\s*(B|KiB|MiB|GiB|TiB|%|ms|s|MB/s|GB/s|/s)?$`)

// parseShown reads a number as the dashboard formats it, in the unit of
// its JSON field (bytes, a ratio for %, seconds, GB/s), with the rounding
// tolerance of its shown digits.
func parseShown(text string) (v, tol float64, err error) {
	m := shownRE.FindStringSubmatch(strings.TrimSpace(text))
	if m == nil {
		return 0, 0, fmt.Errorf("text %q is not a number the dashboard shows", text)
	}
	v, err = strconv.ParseFloat(m[1]+"."+m[2]+"0", 64)
	if err != nil {
		return 0, 0, err
	}
	unit := map[string]float64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"%": 0.01, "ms": 0.001, "s": 1, "MB/s": 0.001, "GB/s": 1, "/s": 1}[m[3]]
	return v * unit, 0.5 * math.Pow(10, -float64(len(m[2]))) * unit, nil
}

func getJSON[T any](t *testing.T, url string) T {
	t.Helper()
	var v T
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return v
}

// promCounter sums a counter's samples in base's Prometheus /metrics.
func promCounter(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, m := range fams[name].GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}
