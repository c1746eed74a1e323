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
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/proxy"
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
	proxyURL := regexp.MustCompile(`proxy on (http://\S+)`).FindStringSubmatch(upLine)[1]
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
		resp, err := http.Post(proxyURL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hello status","max_tokens":4}`))
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

	out, errOut, code := runStatus(t, "--master", admin, "--proxy", proxyURL, "--json")
	if code != 0 {
		t.Fatalf("status --json: %d %s", code, errOut)
	}
	var st clusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ms := st.Master
	if ms == nil || ms.Error != "" || ms.Summary == nil {
		t.Fatalf("master: %+v", ms)
	}
	// The master's numbers are its /api/summary's (the dashboard's data).
	var want masterserver.SummaryJSON
	if err := json.Unmarshal([]byte(httpBody(t, "http://"+admin+"/api/summary")), &want); err != nil {
		t.Fatal(err)
	}
	got := *ms.Summary
	got.TimeUnixMs = want.TimeUnixMs
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("status's master summary\n%+v\n/api/summary\n%+v", got, want)
	}
	if got.Objects != 3 || got.Memory.Capacity != 16<<20 || len(got.SegmentList) != 2 || got.Counters.Puts != 3 ||
		got.Memory.Objects != 6 || got.Memory.Bytes != 6*uint64(len("value")) {
		t.Fatalf("master summary %+v: want 3 objects x 2 replicas on 2 segments of 8 MiB", got)
	}
	var replicas int
	for _, g := range got.SegmentList {
		replicas += g.Objects
	}
	if replicas != 6 {
		t.Fatalf("replicas on segments: %d, want 6 (3 keys x 2)", replicas)
	}

	ps := st.Proxy
	if ps == nil || ps.Error != "" || ps.Summary == nil {
		t.Fatalf("proxy: %+v", ps)
	}
	s := ps.Summary
	if s.Health != "ok" || len(s.Instances) != 3 || s.Requests.ByCode["200"] != 4 || s.TTFT.Count != 4 || s.TPOT.Count == 0 ||
		s.FirstByte.Count != 4 || s.TTFT.Quantile(0.5) <= 0 || s.TTFT.Quantile(0.99) < s.TTFT.Quantile(0.5) || len(s.Pairs) == 0 ||
		s.Transfer.Pulls == 0 || s.Transfer.PullBytes <= 0 || s.Transfer.GBps <= 0 {
		t.Fatalf("proxy figures: %+v", s)
	}
	// The proxy's numbers are its /api/summary's (the engines' gauges are
	// not compared: prefill may still be freeing the pulled KV).
	var pw proxy.SummaryJSON
	if err := json.Unmarshal([]byte(httpBody(t, proxyURL+"/api/summary")), &pw); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Requests, pw.Requests) || !reflect.DeepEqual(s.Pairs, pw.Pairs) || !reflect.DeepEqual(s.TTFT, pw.TTFT) ||
		!reflect.DeepEqual(s.FirstByte, pw.FirstByte) || s.Transfer.PullBytes != pw.Transfer.PullBytes || s.Transfer.Pulls != pw.Transfer.Pulls || s.Transfer.KVHitRate != pw.Transfer.KVHitRate || len(pw.Instances) != len(s.Instances) {
		t.Fatalf("status's proxy summary\n%+v\n/api/summary\n%+v", s, pw)
	}
	for i, in := range s.Instances {
		w := pw.Instances[i]
		if in.Role != w.Role || in.URL != w.URL || in.Healthy != w.Healthy || !in.Scraped || in.Finished != w.Finished {
			t.Errorf("instance %d: %+v vs /api/summary %+v", i, in, w)
		}
	}

	// The text form prints the same numbers.
	text, errOut, code := runStatus(t, "--master", admin, "--proxy", proxyURL)
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	t.Logf("status:\n%s", text)
	for _, want := range []string{
		"master http://" + admin, fmt.Sprintf("objects %d ", got.Objects), fmt.Sprintf("puts %d ", got.Counters.Puts),
		fmt.Sprintf("leased %d ", got.Leased), "6 replica(s) of " + formatSize(got.Memory.Bytes),
		formatSize(got.Memory.Used) + " of 16.0 MiB used", "on 2 segment(s)", got.SegmentList[0].Name, got.SegmentList[1].Name,
		"proxy " + proxyURL + "  (ok)", fmt.Sprintf("requests 4 answered (200: 4), 0 in flight on %d P/D pair(s)", len(s.Pairs)),
		"TTFT p50 ", "(n=4)", "KV transfer " + formatGBps(s.Transfer.GBps), fmt.Sprintf("KV hit rate %.1f%%", 100*s.Transfer.KVHitRate),
		"PREFILL", s.Pairs[0].Decode,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "  decode ") != 2 || strings.Count(text, "  prefill ") != 1 {
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
	_, errOut, code = runStatus(t, "--master", proxyURL, "--timeout", "2s")
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
