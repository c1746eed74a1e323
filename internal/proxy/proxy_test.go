package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/kvevents/kvleak"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, kvleak.IgnoreZMQ()...)
}

// fakeEngine is a hand-written fake of an engine's OpenAI server (and, for
// prefill, of its bootstrap registry).
type fakeEngine struct {
	t         *testing.T
	srv       *httptest.Server
	boot      *httptest.Server
	healthy   atomic.Bool
	status    atomic.Int32 // status for generate requests (0 = 200)
	block     atomic.Bool  // generate waits for the request to be cancelled
	silent    atomic.Bool  // with block: send no headers before waiting
	chunks    []string     // SSE payloads streamed by generate
	cancelled chan struct{}
	arrived   chan struct{} // a generate request arrived (buffered)
	after     chan struct{} // if set, generate waits for it before answering

	mu       sync.Mutex
	bodies   []map[string]any
	released []string
}

func newFake(t *testing.T, prefill bool, chunks ...string) *fakeEngine {
	f := &fakeEngine{t: t, chunks: chunks, cancelled: make(chan struct{}, 16), arrived: make(chan struct{}, 16)}
	f.healthy.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if !f.healthy.Load() {
			w.WriteHeader(500)
			return
		}
		w.Write([]byte("ok"))
	})
	gen := func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			t.Errorf("fake got bad JSON: %v", err)
		}
		f.mu.Lock()
		f.bodies = append(f.bodies, m)
		f.mu.Unlock()
		select {
		case f.arrived <- struct{}{}:
		default:
		}
		if f.after != nil {
			select {
			case <-f.after:
			case <-r.Context().Done():
				return
			}
		}
		if s := f.status.Load(); s != 0 {
			w.WriteHeader(int(s))
			fmt.Fprintf(w, `{"error":{"message":"fake says %d"}}`, s)
			return
		}
		if f.block.Load() && f.silent.Load() {
			<-r.Context().Done()
			f.cancelled <- struct{}{}
			return
		}
		if f.block.Load() {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.Write([]byte("data: {\"first\":true}\n\n"))
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
			f.cancelled <- struct{}{}
			return
		}
		if stream, _ := m["stream"].(bool); stream {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, c := range f.chunks {
				fmt.Fprintf(w, "data: %s\n\n", c)
				http.NewResponseController(w).Flush()
			}
			w.Write([]byte("data: [DONE]\n\n"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"text":%q}]}`, strings.Join(f.chunks, ""))
	}
	mux.HandleFunc("/v1/completions", gen)
	mux.HandleFunc("/v1/chat/completions", gen)
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"data":[{"id":"tiny"}]}`))
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	if prefill {
		bm := http.NewServeMux()
		bm.HandleFunc("/query", func(w http.ResponseWriter, r *http.Request) {
			if !f.healthy.Load() {
				w.WriteHeader(503)
				return
			}
			w.Write([]byte(`{"engine_id":"eng-` + f.srv.URL[len(f.srv.URL)-5:] + `","workers":[{"addr":"x"}]}`))
		})
		bm.HandleFunc("/release", func(w http.ResponseWriter, r *http.Request) {
			var m map[string]string
			json.NewDecoder(r.Body).Decode(&m)
			f.mu.Lock()
			f.released = append(f.released, m["transfer_id"])
			f.mu.Unlock()
		})
		f.boot = httptest.NewServer(bm)
		t.Cleanup(f.boot.Close)
	}
	return f
}

func (f *fakeEngine) spec() string {
	if f.boot != nil {
		return f.srv.URL + ",bootstrap=" + strings.TrimPrefix(f.boot.URL, "http://")
	}
	return f.srv.URL
}

func (f *fakeEngine) got() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.bodies...)
}

func (f *fakeEngine) releasedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.released...)
}

func newProxy(t *testing.T, cfg Config) (*Proxy, *httptest.Server) {
	t.Helper()
	cfg.HealthTimeout = 2 * time.Second
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.CheckNow(context.Background())
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(func() {
		srv.Close()
		p.Close()
	})
	return p, srv
}

func post(t *testing.T, url, body string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestDispatchBothHalvesAndStreamPassthrough(t *testing.T) {
	pre := newFake(t, true, "P")
	dec := newFake(t, false, `{"choices":[{"text":"Hel"}]}`, `{"choices":[{"text":"lo"}]}`)
	_, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}})

	code, body, hdr := post(t, srv.URL+"/v1/completions", `{"model":"tiny","prompt":"hi there","max_tokens":7,"stream":true,"stream_options":{"include_usage":true},"seed":12345678901234567890}`)
	if code != 200 {
		t.Fatalf("code %d body %s", code, body)
	}
	want := "data: {\"choices\":[{\"text\":\"Hel\"}]}\n\ndata: {\"choices\":[{\"text\":\"lo\"}]}\n\ndata: [DONE]\n\n"
	if body != want {
		t.Fatalf("body = %q\nwant %q", body, want)
	}
	if ct := hdr.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content-type %q", ct)
	}
	waitfor.Cond(t, 10*time.Second, "prefill half", func() bool { return len(pre.got()) == 1 })
	pb, db := pre.got(), dec.got()
	if len(pb) != 1 || len(db) != 1 {
		t.Fatalf("prefill got %d, decode got %d requests", len(pb), len(db))
	}
	pk := pb[0]["kv_transfer_params"].(map[string]any)
	dk := db[0]["kv_transfer_params"].(map[string]any)
	tid, _ := pk["transfer_id"].(string)
	if !strings.HasPrefix(tid, "xfer-") || dk["transfer_id"] != tid || hdr.Get("X-Transfer-Id") != tid {
		t.Fatalf("transfer ids: prefill %v decode %v header %q", pk["transfer_id"], dk["transfer_id"], hdr.Get("X-Transfer-Id"))
	}
	if pk["do_remote_decode"] != true || pk["do_remote_prefill"] != false {
		t.Fatalf("prefill params %v", pk)
	}
	if dk["do_remote_prefill"] != true || dk["do_remote_decode"] != false ||
		dk["remote_bootstrap_addr"] != strings.TrimPrefix(pre.boot.URL, "http://") ||
		!strings.HasPrefix(dk["remote_engine_id"].(string), "eng-") {
		t.Fatalf("decode params %v", dk)
	}
	if pb[0]["max_tokens"].(float64) != 1 || pb[0]["stream"] != false || pb[0]["stream_options"] != nil {
		t.Fatalf("prefill body %v", pb[0])
	}
	if db[0]["max_tokens"].(float64) != 7 || db[0]["stream"] != true || db[0]["stream_options"] == nil || db[0]["prompt"] != "hi there" {
		t.Fatalf("decode body %v", db[0])
	}
}

func TestChatNonStreaming(t *testing.T) {
	pre := newFake(t, true, "x")
	dec := newFake(t, false, "answer")
	_, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}})
	code, body, _ := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hello"}],"max_completion_tokens":9}`)
	if code != 200 || body != `{"choices":[{"text":"answer"}]}` {
		t.Fatalf("code %d body %q", code, body)
	}
	waitfor.Cond(t, 10*time.Second, "prefill half", func() bool { return len(pre.got()) == 1 })
	if v := pre.got()[0]["max_completion_tokens"].(float64); v != 1 {
		t.Fatalf("prefill max_completion_tokens %v", v)
	}
	if v := dec.got()[0]["max_completion_tokens"].(float64); v != 9 {
		t.Fatalf("decode max_completion_tokens %v", v)
	}
}

func TestRoundRobinDecode(t *testing.T) {
	pre := newFake(t, true, "x")
	d1, d2 := newFake(t, false, "a"), newFake(t, false, "b")
	_, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{d1.spec(), d2.spec()}, DecodePolicy: PolicyRoundRobin})
	var outs []string
	for i := 0; i < 4; i++ {
		_, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"p"}`)
		outs = append(outs, body)
	}
	if len(d1.got()) != 2 || len(d2.got()) != 2 {
		t.Fatalf("decode split %d/%d, want 2/2 (%v)", len(d1.got()), len(d2.got()), outs)
	}
}

func TestHealthRotationAnd503(t *testing.T) {
	pre := newFake(t, true, "x")
	d1, d2 := newFake(t, false, "a"), newFake(t, false, "b")
	p, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{d1.spec(), d2.spec()}, FailAfter: 2})
	if !p.Ready() {
		t.Fatal("not ready after a successful check")
	}
	d1.healthy.Store(false)
	p.CheckNow(context.Background())
	if !p.Ready() {
		t.Fatal("one failed check took the instance out (FailAfter=2)")
	}
	p.CheckNow(context.Background())
	if p.Ready() {
		t.Fatal("instance still in rotation after 2 failed checks")
	}
	for i := 0; i < 3; i++ {
		if code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"p"}`); code != 200 || !strings.Contains(body, "b") {
			t.Fatalf("code %d body %s", code, body)
		}
	}
	if n := len(d1.got()); n != 0 {
		t.Fatalf("unhealthy instance got %d requests", n)
	}
	d2.healthy.Store(false)
	p.CheckNow(context.Background())
	p.CheckNow(context.Background())
	code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"p"}`)
	if code != 503 || !strings.Contains(body, "no healthy decode instance available") {
		t.Fatalf("code %d body %s", code, body)
	}
	if code := getStatus(t, srv.URL+"/health"); code != 503 {
		t.Fatalf("/health %d with no decode", code)
	}
	// Recovery: one good check puts both back.
	d1.healthy.Store(true)
	d2.healthy.Store(true)
	p.CheckNow(context.Background())
	if !p.Ready() {
		t.Fatal("recovered instances not back in rotation")
	}
	if code, _, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"p"}`); code != 200 {
		t.Fatalf("after recovery code %d", code)
	}
	m := metrics(t, srv.URL)
	if !strings.Contains(m, `mooncake_proxy_no_instance_total{role="decode"} 1`) {
		t.Fatalf("metrics lack the 503 count:\n%s", m)
	}
}

func TestPrefillBootstrapNotReadyIs503(t *testing.T) {
	pre := newFake(t, true, "x")
	pre.boot.Close() // registry down: prefill cannot be used
	dec := newFake(t, false, "a")
	_, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}})
	code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"p"}`)
	if code != 503 || !strings.Contains(body, "prefill") {
		t.Fatalf("code %d body %s", code, body)
	}
}

func TestBackgroundHealthLoopRecovers(t *testing.T) {
	pre := newFake(t, true, "x")
	dec := newFake(t, false, "a")
	dec.healthy.Store(false)
	p, err := New(Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}, HealthInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitfor.Cond(t, 10*time.Second, "prefill healthy", func() bool { h, _, _ := p.prefill[0].snapshot(); return h })
	if p.Ready() {
		t.Fatal("ready with an unhealthy decode")
	}
	dec.healthy.Store(true)
	waitfor.Cond(t, 10*time.Second, "ready", p.Ready)
}

func TestPrefillRejectionReturnedAndDecodeCancelled(t *testing.T) {
	pre := newFake(t, true, "x")
	pre.status.Store(400)
	dec := newFake(t, false, "a")
	dec.block.Store(true)
	dec.silent.Store(true)  // decode waits for its KV: no headers yet
	pre.after = dec.arrived // prefill refuses once decode has the request
	_, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}})
	code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"p"}`)
	if code != 400 || !strings.Contains(body, "fake says 400") {
		t.Fatalf("code %d body %s", code, body)
	}
	select {
	case <-dec.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("decode half not cancelled")
	}
}

func TestDecodeDownGives502AndReleases(t *testing.T) {
	pre := newFake(t, true, "x")
	dec := newFake(t, false, "a")
	p, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}})
	dec.srv.Close()
	code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"p"}`)
	if code != 502 || !strings.Contains(body, "decode instance") {
		t.Fatalf("code %d body %s", code, body)
	}
	if p.Ready() {
		t.Fatal("a refused connection did not take decode out of rotation")
	}
	waitfor.Cond(t, 10*time.Second, "release sent to prefill", func() bool { return len(pre.releasedIDs()) == 1 })
	if !strings.HasPrefix(pre.releasedIDs()[0], "xfer-") {
		t.Fatalf("released %v", pre.releasedIDs())
	}
}

func TestDecodeRefusalReleasesPrefill(t *testing.T) {
	pre := newFake(t, true, "x")
	dec := newFake(t, false, "a")
	dec.status.Store(429)
	_, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}})
	code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"p"}`)
	if code != 429 || !strings.Contains(body, "fake says 429") {
		t.Fatalf("code %d body %s", code, body)
	}
	waitfor.Cond(t, 10*time.Second, "release", func() bool { return len(pre.releasedIDs()) == 1 })
}

func TestClientDisconnectCancelsBothHalves(t *testing.T) {
	pre := newFake(t, true, "x")
	pre.block.Store(true)
	dec := newFake(t, false, "a")
	dec.block.Store(true)
	p, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"p","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, "first") {
		t.Fatalf("first line %q %v", line, err)
	}
	select { // both halves are upstream
	case <-pre.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("prefill half never arrived")
	}
	cancel()
	resp.Body.Close()
	for _, f := range []*fakeEngine{dec, pre} {
		select {
		case <-f.cancelled:
		case <-time.After(10 * time.Second):
			t.Fatal("upstream half not cancelled after client disconnect")
		}
	}
	waitfor.Cond(t, 10*time.Second, "release", func() bool { return len(pre.releasedIDs()) == 1 })
	waitfor.Cond(t, 10*time.Second, "inflight back to 0", func() bool {
		return p.prefill[0].inflight.Load() == 0 && p.decode[0].inflight.Load() == 0
	})
	if m := metrics(t, srv.URL); !strings.Contains(m, "mooncake_proxy_client_disconnects_total 1") {
		t.Fatalf("metrics:\n%s", m)
	}
}

func TestBadRequests(t *testing.T) {
	pre := newFake(t, true, "x")
	dec := newFake(t, false, "a")
	_, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}, MaxBodyBytes: 64})
	tests := []struct {
		name, body string
		code       int
		msg        string
	}{
		{"not json", `hello`, 400, "not a JSON object"},
		{"array", `[1,2]`, 400, "not a JSON object"},
		{"null", `null`, 400, "not a JSON object"},
		{"trailing", `{"a":1} x`, 400, "trailing"},
		{"too big", `{"prompt":"` + strings.Repeat("x", 100) + `"}`, 413, "over 64 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := post(t, srv.URL+"/v1/completions", tc.body)
			if code != tc.code || !strings.Contains(body, tc.msg) {
				t.Fatalf("code %d body %s", code, body)
			}
		})
	}
	if code := getStatus(t, srv.URL+"/v1/completions"); code != 405 {
		t.Fatalf("GET: %d", code)
	}
	if len(pre.got())+len(dec.got()) != 0 {
		t.Fatal("bad requests reached upstream")
	}
	// Still serving.
	if code, _, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"ok"}`); code != 200 {
		t.Fatalf("after bad input: %d", code)
	}
}

func TestConfigValidate(t *testing.T) {
	good := "http://127.0.0.1:1"
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"ok", Config{Prefill: []string{good}, Decode: []string{good}}, true},
		{"bootstrap", Config{Prefill: []string{good + ",bootstrap=127.0.0.1:9"}, Decode: []string{good}}, true},
		{"no prefill", Config{Decode: []string{good}}, false},
		{"no decode", Config{Prefill: []string{good}}, false},
		{"bad url", Config{Prefill: []string{"127.0.0.1:1"}, Decode: []string{good}}, false},
		{"dup", Config{Prefill: []string{good}, Decode: []string{good, good + "/"}}, false},
		{"bad opt", Config{Prefill: []string{good + ",foo=1"}, Decode: []string{good}}, false},
		{"bad port", Config{Prefill: []string{good + ",bootstrap=h:99999"}, Decode: []string{good}}, false},
		{"policy", Config{Prefill: []string{good}, Decode: []string{good}, DecodePolicy: "x"}, false},
		{"conductor", Config{Prefill: []string{good}, Decode: []string{good}, PrefillPolicy: PolicyConductor, TTFTSLO: time.Second}, true},
		{"conductor decode", Config{Prefill: []string{good}, Decode: []string{good}, DecodePolicy: PolicyConductor}, false},
		{"slo without conductor", Config{Prefill: []string{good}, Decode: []string{good}, TTFTSLO: time.Second}, false},
		{"negative slo", Config{Prefill: []string{good}, Decode: []string{good}, PrefillPolicy: PolicyConductor, TTFTSLO: -1}, false},
		{"negative cost", Config{Prefill: []string{good}, Decode: []string{good}, PrefillPolicy: PolicyConductor, Cost: CostModel{PerToken: -1}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, ok want %v", err, tc.ok)
			}
		})
	}
	sp, _ := ParsePrefillSpec("http://127.0.0.5:8100/")
	if sp.URL != "http://127.0.0.5:8100" || sp.Bootstrap != "127.0.0.5:8998" {
		t.Fatalf("spec %+v", sp)
	}
}

func TestModelsPassthrough(t *testing.T) {
	pre := newFake(t, true, "x")
	dec := newFake(t, false, "a")
	_, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}})
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "tiny") {
		t.Fatalf("models %s", b)
	}
}

func metrics(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestPromptText(t *testing.T) {
	tests := []struct {
		ep   string
		body string
		want string
	}{
		{"/v1/completions", `{"prompt":"abc"}`, "abc"},
		{"/v1/completions", `{"prompt":["a","b"]}`, "ab"},
		{"/v1/completions", `{"prompt":[1,2]}`, "1 2 "},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, "user\x00hi\x00"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"yo"}]}]}`, "user\x00yo\x00"},
		{"/v1/completions", `{"prompt":{"weird":1}}`, ""},
	}
	for _, tc := range tests {
		m, err := decodeObject([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := PromptText(tc.ep, m); got != tc.want {
			t.Errorf("%s %s: %q want %q", tc.ep, tc.body, got, tc.want)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{`{"prompt":"x"}`, `{"messages":[{"role":"u","content":[{"text":"a"}]}]}`, `[`, `{"prompt":[[1,2],[3]]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeObject(b)
		if err != nil {
			return
		}
		for _, ep := range []string{"/v1/completions", "/v1/chat/completions"} {
			PromptBlocks(PromptText(ep, m), 8)
		}
		pb, db := BuildBodies(m, "xfer-1", "h:1", "e")
		if _, err := decodeObject(pb); err != nil {
			t.Fatalf("prefill body does not re-parse: %v", err)
		}
		if _, err := decodeObject(db); err != nil {
			t.Fatalf("decode body does not re-parse: %v", err)
		}
	})
}

func TestKVAwareRoutesSharedPrefixToSameInstance(t *testing.T) {
	p1, p2 := newFake(t, true, "x"), newFake(t, true, "x")
	dec := newFake(t, false, "a")
	px, srv := newProxy(t, Config{Prefill: []string{p1.spec(), p2.spec()}, Decode: []string{dec.spec()}, PrefillPolicy: PolicyKVAware})
	doc := strings.Repeat("a shared system prompt that many requests start with. ", 10)
	for i := 0; i < 4; i++ {
		// Equal loads: only the cache decides.
		waitfor.Cond(t, 10*time.Second, "idle prefill", func() bool { return px.prefill[0].inflight.Load()+px.prefill[1].inflight.Load() == 0 })
		if code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"`+doc+` question `+strings.Repeat("?", i)+`"}`); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	waitfor.Cond(t, 10*time.Second, "prefill halves", func() bool { return len(p1.got())+len(p2.got()) == 4 })
	if n1, n2 := len(p1.got()), len(p2.got()); n1 != 4 && n2 != 4 {
		t.Fatalf("shared prefix split over instances: %d/%d", n1, n2)
	}
}

func TestEarlyRejectionAtInFlightLimit(t *testing.T) {
	pre := newFake(t, true, "x")
	dec := newFake(t, false, "a")
	dec.block.Store(true)
	dec.silent.Store(true)
	px, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()}, MaxInFlight: 1})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"p"}`))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitfor.Cond(t, 10*time.Second, "first request in flight", func() bool { return px.decode[0].inflight.Load() == 1 })
	code, body, hdr := post(t, srv.URL+"/v1/completions", `{"prompt":"q"}`)
	if code != 429 || !strings.Contains(body, "requests in flight") || hdr.Get("Retry-After") == "" {
		t.Fatalf("code %d body %s", code, body)
	}
	cancel()
	<-done
	waitfor.Cond(t, 10*time.Second, "drained", func() bool { return px.decode[0].inflight.Load() == 0 && px.prefill[0].inflight.Load() == 0 })
	dec.block.Store(false)
	if code, _, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"r"}`); code != 200 {
		t.Fatalf("after drain: %d", code)
	}
	if m := metrics(t, srv.URL); !strings.Contains(m, `mooncake_proxy_rejected_total{role=`) {
		t.Fatalf("metrics:\n%s", m)
	}
}

// getStatus GETs url and returns the status code (the body is discarded).
func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
