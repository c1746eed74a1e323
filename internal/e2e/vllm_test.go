package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/pdconnector"
	"github.com/kvcache-go/mooncake/internal/proxy"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// python is Debian's interpreter (its python3-* packages live there).
func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Skip("no python3")
	return ""
}

// genReq is one generation request, completions or chat.
type genReq struct {
	chat   bool
	prompt string
	max    int
	stream bool
}

func (g genReq) path() string {
	if g.chat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

func (g genReq) body() map[string]any {
	m := map[string]any{"max_tokens": g.max, "temperature": 0, "stream": g.stream, "ignore_eos": true, "return_token_ids": true}
	if g.chat {
		m["messages"] = []map[string]any{{"role": "user", "content": g.prompt}}
	} else {
		m["prompt"] = g.prompt
	}
	if g.stream {
		m["stream_options"] = map[string]any{"include_usage": true}
	}
	return m
}

// send posts body to base+path with headers and parses a completions or
// chat answer (JSON or SSE).
func send(t *testing.T, ctx context.Context, base, path string, body map[string]any, hdr map[string]string) completion {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s%s: %v", base, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	c := completion{Code: resp.StatusCode, Raw: string(raw)}
	if resp.StatusCode != 200 {
		return c
	}
	c.parse(raw, bytes.HasPrefix(bytes.TrimSpace(raw), []byte("data:")), t.Fatalf)
	return c
}

// pdPair starts a producer and a consumer with the given tweaks.
func pdPair(t *testing.T, pre, dec cluster.InstanceConfig) (*cluster.Instance, *cluster.Instance) {
	t.Helper()
	ctx := context.Background()
	pre.Model, pre.Role = tinyModel(t), pdconnector.RoleProducer
	dec.Model, dec.Role = tinyModel(t), pdconnector.RoleConsumer
	p, err := cluster.StartInstance(ctx, pre)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	d, err := cluster.StartInstance(ctx, dec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return p, d
}

// startPython runs a Python proxy; with ready it waits for "ready PORT" on
// stdout, otherwise for GET /healthcheck on port to answer 200.
func startPython(t *testing.T, port int, ready bool, args ...string) string {
	t.Helper()
	cmd := exec.Command(python(t), args...)
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1")
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	var mu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			mu.Lock()
			t.Logf("python %v stderr:\n%s", args, stderr.String())
			mu.Unlock()
		}
	})
	if ready {
		deadline := time.After(30 * time.Second)
		for {
			select {
			case l := <-lines:
				if m := regexp.MustCompile(`^ready (\d+)$`).FindStringSubmatch(l); m != nil {
					return "http://127.0.0.1:" + m[1]
				}
			case <-exited:
				t.Fatalf("python %v exited: %s", args, stderr.String())
			case <-deadline:
				t.Fatalf("python %v not ready", args)
			}
		}
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	waitfor.Cond(t, 30*time.Second, "proxy /healthcheck", func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		resp, err := http.Get(base + "/healthcheck")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	select {
	case <-exited:
		t.Fatalf("python %v exited: %s", args, stderr.String())
	default:
	}
	return base
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func bootstrapPort(t *testing.T, in *cluster.Instance) string {
	t.Helper()
	_, port, err := net.SplitHostPort(in.BootstrapAddr())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// equalsColocated sends every request shape through base and checks each
// answer against the colocated engine's, token for token.
func equalsColocated(t *testing.T, col *cluster.Instance, base string) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	for i, p := range prompts {
		for _, chat := range []bool{false, true} {
			for _, stream := range []bool{false, true} {
				g := genReq{chat: chat, prompt: p, max: 10, stream: stream}
				want := send(t, ctx, col.URL, g.path(), g.body(), nil)
				got := send(t, ctx, base, g.path(), g.body(), nil)
				if want.Code != 200 || got.Code != 200 {
					t.Fatalf("prompt %d %+v: colocated %d %s, P/D %d %s", i, g, want.Code, want.Raw, got.Code, got.Raw)
				}
				if len(want.TokenIDs) != 10 || !equalInts(want.TokenIDs, got.TokenIDs) || want.Text != got.Text {
					t.Fatalf("prompt %d %+v: P/D %v %q != colocated %v %q", i, g, got.TokenIDs, got.Text, want.TokenIDs, want.Text)
				}
				if !stream && got.KV["kv_load"] != "remote" && got.KV["kv_load"] != "local" {
					t.Fatalf("prompt %d %+v: kv_load %v (%v)", i, g, got.KV["kv_load"], got.KV)
				}
				n++
			}
		}
	}
	return n
}

// vLLM's example proxy flow (our stand-in, stdlib only): pairing by
// X-Request-Id, bootstrap_server_host/port, both halves at once; output
// equals a colocated engine's, streamed and not, completions and chat.
func TestVLLMExampleProxyFlow(t *testing.T) {
	_, dec := checkProxyFlow(t, func(pre, dec *cluster.Instance) string {
		return startPython(t, 0, true, "testdata/vllm_flow_proxy.py", "--port", "0",
			"--prefill", pre.URL, bootstrapPort(t, pre), "--decode", dec.URL)
	})
	if ok := dec.Conn.Stats().PullsOK; ok == 0 {
		t.Fatal("decode pulled nothing")
	}
}

// vLLM's own example proxy, unchanged, from the path in MOONCAKE_VLLM_PROXY
// (examples/online_serving/disaggregated_serving/mooncake_connector/
// mooncake_connector_proxy.py of a vllm-project/vllm checkout), with
// Debian's python3-fastapi, -httpx and -uvicorn.
func TestVLLMRealExampleProxy(t *testing.T) {
	script := vllmProxyScript(t)
	checkProxyFlow(t, func(pre, dec *cluster.Instance) string {
		port := freePort(t)
		harness, _ := filepath.Abs("testdata/run_vllm_proxy.py")
		return startPython(t, port, false, harness, script, "--port", strconv.Itoa(port),
			"--prefill", pre.URL, bootstrapPort(t, pre), "--decode", dec.URL)
	})
}

// checkProxyFlow runs a colocated engine and a producer/consumer pair behind
// the proxy that start runs (it returns the proxy's base URL): the proxy's
// output equals the colocated engine's, nothing leaks, and prefill freed the
// KV of every request pulled or released.
func checkProxyFlow(t *testing.T, start func(pre, dec *cluster.Instance) string) (*cluster.Instance, *cluster.Instance) {
	t.Helper()
	col := startColocated(t)
	pre, dec := pdPair(t, cluster.InstanceConfig{}, cluster.InstanceConfig{})
	n := equalsColocated(t, col, start(pre, dec))
	assertNoLeaks(t, pre, dec)
	s := pre.Conn.Stats()
	if int(s.FreedDone+s.FreedReleased) != n || s.FreedTimeout != 0 {
		t.Fatalf("prefill freed %+v, want %d done or released", s, n)
	}
	return pre, dec
}

// vllmProxyScript is the path of vLLM's example proxy from
// MOONCAKE_VLLM_PROXY; the test is skipped without it or without the Python
// packages it needs.
func vllmProxyScript(t *testing.T) string {
	t.Helper()
	script := os.Getenv("MOONCAKE_VLLM_PROXY")
	if script == "" {
		t.Skip("set MOONCAKE_VLLM_PROXY to vLLM's examples/online_serving/disaggregated_serving/mooncake_connector/mooncake_connector_proxy.py to run it against our engines")
	}
	if err := exec.Command(python(t), "-c", "import fastapi, httpx, uvicorn").Run(); err != nil {
		t.Skip("needs python3-fastapi python3-httpx python3-uvicorn (scripts/deps.sh)")
	}
	return script
}

// recorded is one request a fake upstream got.
type recorded struct {
	path string
	hdr  http.Header
	body map[string]any
}

// The stand-in sends exactly what vLLM's example proxy sends; with
// MOONCAKE_VLLM_PROXY set, the real proxy is held to the same bytes.
func TestVLLMProxyStandInSendsExactFields(t *testing.T) {
	checkVLLMProxyFields(t, func(pre, dec string) string {
		return startPython(t, 0, true, "testdata/vllm_flow_proxy.py", "--port", "0", "--prefill", pre, "7777", "--decode", dec)
	})
}

func TestVLLMRealExampleProxySendsExactFields(t *testing.T) {
	script := vllmProxyScript(t)
	harness, _ := filepath.Abs("testdata/run_vllm_proxy.py")
	checkVLLMProxyFields(t, func(pre, dec string) string {
		port := freePort(t)
		return startPython(t, port, false, harness, script, "--port", strconv.Itoa(port), "--prefill", pre, "7777", "--decode", dec)
	})
}

func checkVLLMProxyFields(t *testing.T, start func(pre, dec string) string) {
	var mu sync.Mutex
	var got []recorded
	fake := func(role string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var m map[string]any
			json.NewDecoder(r.Body).Decode(&m)
			mu.Lock()
			got = append(got, recorded{path: role + r.URL.Path, hdr: r.Header.Clone(), body: m})
			mu.Unlock()
			w.Write([]byte(`{"choices":[{"text":"ok","finish_reason":"length"}]}`))
		}))
	}
	p, d := fake("prefill"), fake("decode")
	defer p.Close()
	defer d.Close()
	base := start(p.URL, d.URL)
	body := map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}},
		"max_tokens": 9, "max_completion_tokens": 9, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	if c := send(t, context.Background(), base, "/v1/chat/completions", body, nil); c.Code != 200 {
		t.Fatal(c.Raw)
	}
	waitfor.Cond(t, 10*time.Second, "both halves", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	byRole := map[string]recorded{}
	for _, r := range got {
		byRole[strings.SplitN(r.path, "/", 2)[0]] = r
	}
	pr, dr := byRole["prefill"], byRole["decode"]
	if pr.path != "prefill/v1/chat/completions" || dr.path != "decode/v1/chat/completions" {
		t.Fatalf("paths %q %q", pr.path, dr.path)
	}
	id := pr.hdr.Get("X-Request-Id")
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(id) || dr.hdr.Get("X-Request-Id") != id {
		t.Fatalf("X-Request-Id prefill %q decode %q", id, dr.hdr.Get("X-Request-Id"))
	}
	if pr.hdr.Get("Authorization") != "Bearer None" {
		t.Fatalf("Authorization %q", pr.hdr.Get("Authorization"))
	}
	wantP := map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}},
		"max_tokens": 1.0, "max_completion_tokens": 1.0, "stream": false,
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false}}
	wantD := map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}},
		"max_tokens": 9.0, "max_completion_tokens": 9.0, "stream": true, "stream_options": map[string]any{"include_usage": true},
		"kv_transfer_params": map[string]any{"do_remote_decode": false, "do_remote_prefill": true,
			"bootstrap_server_host": "127.0.0.1", "bootstrap_server_port": 7777.0}}
	if a, b := mustJSON(pr.body), mustJSON(wantP); a != b {
		t.Fatalf("prefill body\n got %s\nwant %s", a, b)
	}
	if a, b := mustJSON(dr.body), mustJSON(wantD); a != b {
		t.Fatalf("decode body\n got %s\nwant %s", a, b)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The seed connector's flow (prefill's returned params forwarded to decode,
// same X-Request-Id) and the reworked connector's (transfer_id, an http://
// bootstrap address) both give the colocated output.
func TestVLLMSeedAndReworkedContracts(t *testing.T) {
	col := startColocated(t)
	pre, dec := pdPair(t, cluster.InstanceConfig{}, cluster.InstanceConfig{})
	ctx := context.Background()
	g := genReq{prompt: prompts[2], max: 8}
	want := send(t, ctx, col.URL, g.path(), g.body(), nil)

	// Seed: prefill returns remote_host/remote_port; the proxy forwards them.
	pb := g.body()
	pb["max_tokens"], pb["kv_transfer_params"] = 1, map[string]any{"do_remote_decode": true}
	pr := send(t, ctx, pre.URL, g.path(), pb, map[string]string{"X-Request-Id": "seed-1"})
	if pr.Code != 200 || pr.KV["remote_host"] != "127.0.0.1" || pr.KV["do_remote_prefill"] != true {
		t.Fatalf("prefill answered %d %s", pr.Code, pr.Raw)
	}
	seed := map[string]any{"do_remote_prefill": true, "do_remote_decode": false,
		"remote_host": pr.KV["remote_host"], "remote_port": pr.KV["remote_port"]}
	db := g.body()
	db["kv_transfer_params"] = seed
	got := send(t, ctx, dec.URL, g.path(), db, map[string]string{"X-Request-Id": "seed-1"})
	if got.Code != 200 || got.KV["kv_load"] != "remote" || !equalInts(got.TokenIDs, want.TokenIDs) {
		t.Fatalf("seed: %d %s", got.Code, got.Raw)
	}

	// Reworked: transfer_id, remote_bootstrap_addr as a URL, remote_engine_id.
	pb["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "transfer_id": "xfer-rw"}
	if pr := send(t, ctx, pre.URL, g.path(), pb, nil); pr.Code != 200 || pr.KV["transfer_id"] != "xfer-rw" {
		t.Fatalf("prefill answered %d %s", pr.Code, pr.Raw)
	}
	db["kv_transfer_params"] = map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "transfer_id": "xfer-rw",
		"remote_bootstrap_addr": "http://" + pre.BootstrapAddr(), "remote_engine_id": pre.Conn.EngineID(), "remote_block_ids": []int{1, 2}, "tp_size": 1}
	got = send(t, ctx, dec.URL, g.path(), db, nil)
	if got.Code != 200 || got.KV["kv_load"] != "remote" || !equalInts(got.TokenIDs, want.TokenIDs) {
		t.Fatalf("reworked: %d %s", got.Code, got.Raw)
	}
	assertNoLeaks(t, pre, dec)
}

// Failures of the vLLM contracts: clear 4xx/5xx, zero leaked blocks.
func TestVLLMContractFailures(t *testing.T) {
	pre, dec := pdPair(t, cluster.InstanceConfig{AbortTimeout: time.Second},
		cluster.InstanceConfig{PullTimeout: 6 * time.Second, FailurePolicy: engine.PolicyFail})
	ctx := context.Background()
	host, port, _ := net.SplitHostPort(pre.BootstrapAddr())
	g := genReq{prompt: prompts[1], max: 4}
	withKV := func(kv map[string]any) map[string]any { b := g.body(); b["kv_transfer_params"] = kv; return b }
	prefillHalf := func(id string) {
		b := withKV(map[string]any{"do_remote_decode": true, "do_remote_prefill": false})
		b["max_tokens"] = 1
		if pr := send(t, ctx, pre.URL, g.path(), b, map[string]string{"X-Request-Id": id}); pr.Code != 200 {
			t.Fatalf("prefill %s: %d %s", id, pr.Code, pr.Raw)
		}
	}
	cases := []struct {
		name    string
		prefill string // X-Request-Id of a prefill half sent first ("" none)
		id      string
		kv      map[string]any
		code    int
		msg     string
	}{
		{"prefill half never arrives", "", "lonely", map[string]any{"do_remote_prefill": true,
			"bootstrap_server_host": host, "bootstrap_server_port": port}, 500, "did not finish in time"},
		{"mismatched request ids", "p-side", "d-side", map[string]any{"do_remote_prefill": true,
			"bootstrap_server_host": host, "bootstrap_server_port": port}, 500, "did not finish in time"},
		{"unknown bootstrap address", "p-unknown", "p-unknown", map[string]any{"do_remote_prefill": true,
			"bootstrap_server_host": "127.0.0.1", "bootstrap_server_port": freePort(t)}, 500, "unreachable"},
		{"malformed port", "", "bad-port", map[string]any{"do_remote_prefill": true,
			"bootstrap_server_host": host, "bootstrap_server_port": "eighty"}, 400, "bootstrap_server_port"},
		{"no bootstrap address", "", "no-addr", map[string]any{"do_remote_prefill": true}, 400, "bootstrap address"},
		{"transfer id not a string", "", "bad-tid", map[string]any{"do_remote_prefill": true, "transfer_id": 7,
			"remote_bootstrap_addr": pre.BootstrapAddr()}, 400, "transfer_id must be a string"},
		{"bad remote_bootstrap_addr", "", "bad-addr", map[string]any{"do_remote_prefill": true, "transfer_id": "x",
			"remote_bootstrap_addr": "nowhere"}, 400, "remote_bootstrap_addr"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prefill != "" {
				prefillHalf(tc.prefill)
			}
			got := send(t, ctx, dec.URL, g.path(), withKV(tc.kv), map[string]string{"X-Request-Id": tc.id})
			if got.Code != tc.code || !strings.Contains(got.Raw, tc.msg) {
				t.Fatalf("got %d %s, want %d with %q", got.Code, got.Raw, tc.code, tc.msg)
			}
			assertNoLeaks(t, pre, dec)
		})
	}
}

// Our proxy speaking each protocol in front of our engines: output equals
// colocated, and nothing leaks (the SGLang protocol is the router's
// documented flow: the same body to both halves with a bootstrap room).
func TestProxyProtocolsEqualColocated(t *testing.T) {
	col := startColocated(t)
	for _, proto := range proxy.Protocols {
		t.Run(proto, func(t *testing.T) {
			c := startCluster(t, cluster.Config{Proxy: proxy.Config{Protocol: proto}})
			equalsColocated(t, col, c.URL)
			assertNoLeaks(t, c.Prefill[0], c.Decode[0])
			if s := c.Prefill[0].Conn.Stats(); s.FreedTimeout != 0 || s.FreedDone == 0 {
				t.Fatalf("prefill freed %+v", s)
			}
		})
	}
}

// Our engines publish KV events; the proxy's kvcache-aware policy indexes
// instances from them alone and sends a repeated prompt to the instance
// that computed it.
func TestKVEventsFeedProxy(t *testing.T) {
	col := startColocated(t)
	c := startCluster(t, cluster.Config{Prefill: 2, PrefillEvents: true})
	ctx := context.Background()
	idx := c.Proxy.EventIndex()
	if idx == nil {
		t.Fatal("the proxy follows no KV events")
	}
	p := strings.Repeat("Shared system prompt that the router should remember. ", 3)
	toks := tokenizer.ByteLevel{}.Encode(p, true)
	want := kvevents.PromptBlocks("", 16, toks)
	first := complete(t, ctx, c.URL, p, 4, false)
	if first.Code != 200 {
		t.Fatal(first.Raw)
	}
	var holder *cluster.Instance
	waitfor.Cond(t, 10*time.Second, "an instance announced the prompt's blocks", func() bool {
		for _, in := range c.Prefill {
			if idx.Matched(in.URL, want) == len(want) {
				holder = in
				return true
			}
		}
		return false
	})
	before := metricValue(t, holder.URL, `mooncake_engine_requests_total{finish_reason="length"}`)
	for i := 0; i < 3; i++ {
		got := complete(t, ctx, c.URL, p, 4, false)
		ref := complete(t, ctx, col.URL, p, 4, false)
		if got.Code != 200 || !equalInts(got.TokenIDs, ref.TokenIDs) {
			t.Fatalf("%d %s", got.Code, got.Raw)
		}
		waitfor.Cond(t, 5*time.Second, "prefill half done", func() bool {
			return holder.Engine.Stats().Running == 0
		})
	}
	if after := metricValue(t, holder.URL, `mooncake_engine_requests_total{finish_reason="length"}`); after-before != 3 {
		t.Fatalf("holder served %v of 3 repeated prompts", after-before)
	}
	assertNoLeaks(t, append(append([]*cluster.Instance{}, c.Prefill...), c.Decode...)...)
}

// SGLang's contract, as its routers drive it: the same body, with
// bootstrap_host, bootstrap_port and bootstrap_room, to prefill and decode
// at once; decode learns the pull address from prefill's GET /route.
func TestSGLangContract(t *testing.T) {
	col := startColocated(t)
	pre, dec := pdPair(t, cluster.InstanceConfig{AbortTimeout: time.Second},
		cluster.InstanceConfig{PullTimeout: 6 * time.Second, FailurePolicy: engine.PolicyFail})
	ctx := context.Background()
	host, port, _ := net.SplitHostPort(pre.BootstrapAddr())
	resp, err := http.Get("http://" + pre.BootstrapAddr() + "/route?prefill_dp_rank=0&target_tp_rank=0&target_pp_rank=0")
	if err != nil {
		t.Fatal(err)
	}
	var ri map[string]any
	json.NewDecoder(resp.Body).Decode(&ri)
	resp.Body.Close()
	if ri["rank_ip"] != host || ri["page_size"] != 16.0 {
		t.Fatalf("GET /route: %v", ri)
	}
	both := func(g genReq, room any, bhost string, bport any) (completion, completion) {
		b := g.body()
		b["bootstrap_host"], b["bootstrap_port"], b["bootstrap_room"] = bhost, bport, room
		pc := make(chan completion, 1)
		go func() { pc <- send(t, ctx, pre.URL, g.path(), b, nil) }()
		d := send(t, ctx, dec.URL, g.path(), b, nil)
		return <-pc, d
	}
	for i, chat := range []bool{false, true} {
		for _, stream := range []bool{false, true} {
			g := genReq{chat: chat, prompt: prompts[2], max: 9, stream: stream}
			want := send(t, ctx, col.URL, g.path(), g.body(), nil)
			room := json.Number(strconv.FormatUint(1<<62+uint64(i)*2+map[bool]uint64{false: 0, true: 1}[stream], 10))
			p, d := both(g, room, host, port)
			if p.Code != 200 || len(p.TokenIDs) != 1 {
				t.Fatalf("prefill half: %d %s (want one token)", p.Code, p.Raw)
			}
			if d.Code != 200 || !equalInts(d.TokenIDs, want.TokenIDs) || d.Text != want.Text {
				t.Fatalf("%+v: %d %s != %v", g, d.Code, d.Raw, want.TokenIDs)
			}
			if !stream && (d.KV["kv_load"] != "remote" || d.KV["aux_first_token"] != float64(want.TokenIDs[0]) || d.KV["aux_first_token_match"] != true) {
				t.Fatalf("kv_load or aux data (prefill's first token %v): %v", want.TokenIDs[0], d.KV)
			}
		}
	}
	assertNoLeaks(t, pre, dec)
	// SGLang's poll states, in metrics.
	if v := metricValue(t, dec.URL, `mooncake_pd_kv_poll_total{code="4",role="consumer",state="success"}`); v != 4 {
		t.Fatalf("decode success polls %v, want 4", v)
	}
	if v := metricValue(t, pre.URL, `mooncake_pd_kv_poll_total{code="4",role="producer",state="success"}`); v != 4 {
		t.Fatalf("prefill success polls %v, want 4", v)
	}
	if v := metricValue(t, pre.URL, `mooncake_pd_kv_poll_transfers{code="2",role="producer",state="waiting_for_input"}`); v != 0 {
		t.Fatalf("prefill still waiting for input: %v", v)
	}

	g := genReq{prompt: prompts[1], max: 3}
	t.Run("unknown bootstrap address", func(t *testing.T) {
		_, d := both(g, 77, "127.0.0.1", freePort(t))
		if d.Code != 500 || !strings.Contains(d.Raw, "unreachable") {
			t.Fatalf("%d %s", d.Code, d.Raw)
		}
		assertNoLeaks(t, pre, dec)
	})
	t.Run("bad room", func(t *testing.T) {
		p, d := both(g, "room-9", host, port)
		if p.Code != 400 || d.Code != 400 || !strings.Contains(d.Raw, "bootstrap_room") {
			t.Fatalf("prefill %d %s, decode %d %s", p.Code, p.Raw, d.Code, d.Raw)
		}
		assertNoLeaks(t, pre, dec)
	})
	t.Run("prefill half never arrives", func(t *testing.T) {
		b := g.body()
		b["bootstrap_host"], b["bootstrap_port"], b["bootstrap_room"] = host, port, 78
		d := send(t, ctx, dec.URL, g.path(), b, nil)
		if d.Code != 500 || !strings.Contains(d.Raw, "did not finish in time") {
			t.Fatalf("%d %s", d.Code, d.Raw)
		}
		assertNoLeaks(t, pre, dec)
		if v := metricValue(t, dec.URL, `mooncake_pd_kv_poll_total{code="0",role="consumer",state="failed"}`); v != 2 {
			t.Fatalf("decode failed polls %v, want 2", v)
		}
	})
}
