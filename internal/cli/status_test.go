package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// runStatus runs `mooncake status` in process.
func runStatus(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code, err := Run(context.Background(), append([]string{"status"}, args...), &out, &errOut)
	if err != nil {
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), code
}

func httpBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metricValue reads one sample "name value" (no labels) from Prometheus text.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no %s in\n%s", name, text)
	}
	var v float64
	fmt.Sscan(m[1], &v)
	return v
}

// TestStatusAgainstRealCluster: a master with two storage nodes and a P/D
// cluster behind a proxy, all real and on loopback; the numbers `status`
// prints (text and JSON) are the ones their endpoints serve.
func TestStatusAgainstRealCluster(t *testing.T) {
	line, _ := startCmd(t, "master", "--port", "0", "--http-port", "0")
	m := regexp.MustCompile(`grpc=(\S+) http=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("master printed %q", line)
	}
	grpcAddr, admin := m[1], m[2]
	for range 2 {
		startCmd(t, "store", "--master", grpcAddr, "--segment-size", "8MiB", "--http-port", "-1")
	}
	upLine, _ := startCmd(t, "up", "--port", "0", "--model", "tiny", "--decode", "2")
	proxy := regexp.MustCompile(`proxy on (http://\S+)`).FindStringSubmatch(upLine)[1]
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	file := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(file, []byte("value"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var out bytes.Buffer
		code, err := Run(context.Background(), []string{"put", "--master", grpcAddr, "--replicas", "2", fmt.Sprintf("key/%d", i), file}, &out, io.Discard)
		if code != 0 || err != nil {
			t.Fatalf("put: %d %v", code, err)
		}
	}
	for range 4 {
		resp, err := http.Post(proxy+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hello status","max_tokens":4}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("completion: %d", resp.StatusCode)
		}
	}
	waitfor.Cond(t, 10*time.Second, "both segments mounted", func() bool {
		return strings.Count(httpBody(t, "http://"+admin+"/get_all_segments"), `"name"`) == 2
	})

	out, errOut, code := runStatus(t, "--master", admin, "--proxy", proxy, "--json")
	if code != 0 {
		t.Fatalf("status --json: %d %s", code, errOut)
	}
	var st clusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	metrics := httpBody(t, "http://"+admin+"/metrics")
	ms := st.Master
	if ms == nil || ms.Error != "" {
		t.Fatalf("master: %+v", ms)
	}
	for name, got := range map[string]uint64{
		"mooncake_master_objects": ms.Objects, "mooncake_master_capacity_bytes": ms.Memory.Capacity,
		"mooncake_master_used_bytes": ms.Memory.Used, "mooncake_master_segments": uint64(ms.Memory.Segments),
		"mooncake_master_puts_total": ms.Puts, "mooncake_master_evictions_total": ms.Evictions,
	} {
		if want := metricValue(t, metrics, name); float64(got) != want {
			t.Errorf("%s: status %d, /metrics %v", name, got, want)
		}
	}
	if ms.Objects != 3 || ms.Memory.Capacity != 16<<20 || len(ms.Segments) != 2 {
		t.Fatalf("master status %+v", ms)
	}
	var segs []segmentStatus
	json.Unmarshal([]byte(httpBody(t, "http://"+admin+"/get_all_segments")), &segs)
	var replicas uint64
	for i, s := range ms.Segments {
		replicas += s.Objects
		found := false
		for _, w := range segs {
			found = found || w == s
		}
		if !found {
			t.Errorf("segment %d %+v not in /get_all_segments %+v", i, s, segs)
		}
	}
	if replicas != 6 {
		t.Fatalf("replicas on segments: %d, want 6 (3 keys x 2)", replicas)
	}

	ps := st.Proxy
	if ps == nil || ps.Error != "" || ps.Health != "ok" || len(ps.Instances) != 3 {
		t.Fatalf("proxy: %+v", ps)
	}
	if ps.Requests["200"] != 4 || ps.TTFT.Count != 4 || ps.TPOT.Count == 0 || ps.FirstByte.Count != 4 || ps.TTFT.P50 <= 0 || ps.TTFT.P99 < ps.TTFT.P50 {
		t.Fatalf("proxy figures: %+v", ps)
	}
	var health struct {
		Instances []struct {
			Role, URL string
			Healthy   bool
		}
	}
	json.Unmarshal([]byte(httpBody(t, proxy+"/health")), &health)
	for i, in := range ps.Instances {
		h := health.Instances[i]
		if in.Role != h.Role || in.URL != h.URL || in.Healthy != h.Healthy || in.ScrapeError != "" {
			t.Errorf("instance %d: %+v vs /health %+v", i, in, h)
		}
		em := httpBody(t, in.URL+"/metrics")
		if want := metricValue(t, em, "mooncake_engine_kv_blocks_free"); in.KVFree != want {
			t.Errorf("%s kv free %v, /metrics %v", in.URL, in.KVFree, want)
		}
	}

	// The text form prints the same numbers.
	text, errOut, code := runStatus(t, "--master", admin, "--proxy", proxy)
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	for _, want := range []string{
		"master http://" + admin, fmt.Sprintf("objects %d ", ms.Objects), fmt.Sprintf("puts %d ", ms.Puts),
		formatSize(ms.Memory.Used) + " of 16.0 MiB used", "on 2 segment(s)", ms.Segments[0].Name, ms.Segments[1].Name,
		"proxy " + proxy + "  (ok)", "requests 4 answered (200: 4), 0 in flight", "TTFT p50 ", "(n=4)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "decode ") != 2 || strings.Count(text, "prefill ") != 1 {
		t.Errorf("instance rows:\n%s", text)
	}

	// Given no flag, status asks both defaults and shows what answers.
	defer func(m, p string) { defaultMasterAdmin, defaultProxy = m, p }(defaultMasterAdmin, defaultProxy)
	defaultMasterAdmin, defaultProxy = admin, "127.0.0.1:1"
	text, errOut, code = runStatus(t)
	if code != 0 || !strings.Contains(text, "master http://"+admin) || strings.Contains(text, "proxy") ||
		!strings.Contains(errOut, "note: no answer from the proxy http://127.0.0.1:1") {
		t.Fatalf("defaults, proxy absent: %d %q %q", code, text, errOut)
	}

	// The master's gRPC port given instead of its admin port: said so.
	out, _, code = runStatus(t, "--master", grpcAddr, "--timeout", "2s")
	if code != 1 || !strings.Contains(out, "speaks gRPC, not HTTP: give the master's admin port") {
		t.Fatalf("gRPC port as master: %d %q", code, out)
	}
	// The proxy's address given as the master's: a clear error, exit 1.
	_, errOut, code = runStatus(t, "--master", proxy, "--timeout", "2s")
	if code != 1 || !strings.Contains(errOut, "no answer from the master") {
		t.Fatalf("proxy as master: %d %q", code, errOut)
	}
}

// TestStatusUnreachable: a refused port and a port that accepts and never
// answers both end within --timeout with exit 1 and the reason.
func TestStatusUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept and hold: a silent host
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	refused.Close()

	start := time.Now()
	out, errOut, code := runStatus(t, "--master", ln.Addr().String(), "--proxy", refusedAddr, "--timeout", "500ms")
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v with --timeout 500ms", took)
	}
	if code != 1 || !strings.Contains(errOut, "no answer from the master http://"+ln.Addr().String()+" and the proxy http://"+refusedAddr) {
		t.Fatalf("exit %d stderr %q", code, errOut)
	}
	if !strings.Contains(out, "no answer in time") || !strings.Contains(out, "connection refused") {
		t.Fatalf("stdout %q", out)
	}
	// --json still prints the object, with the errors.
	out, _, code = runStatus(t, "--proxy", refusedAddr, "--json")
	var st clusterStatus
	if code != 1 || json.Unmarshal([]byte(out), &st) != nil || st.Proxy == nil || !strings.Contains(st.Proxy.Error, "refused") || st.Master != nil {
		t.Fatalf("--json: %d %q", code, out)
	}
}

func TestQuantile(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	f := func(v float64) *float64 { return &v }
	h := &dto.Histogram{SampleCount: u(100), Bucket: []*dto.Bucket{
		{UpperBound: f(0.01), CumulativeCount: u(50)},
		{UpperBound: f(0.1), CumulativeCount: u(90)},
		{UpperBound: f(1), CumulativeCount: u(100)},
	}}
	for _, c := range []struct{ q, want float64 }{{0.5, 0.01}, {0.25, 0.005}, {0.7, 0.055}, {0.99, 0.91}} {
		if got := quantile(h, c.q); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("q%v = %v, want %v", c.q, got, c.want)
		}
	}
	m := mergeHist([]*dto.Histogram{h, nil, h})
	if m.GetSampleCount() != 200 || m.Bucket[1].GetCumulativeCount() != 180 || quantile(m, 0.5) != 0.01 {
		t.Fatalf("merged %+v", m)
	}
	if q := histQuantiles(nil); q.Count != 0 {
		t.Fatalf("nil histogram %+v", q)
	}
}
