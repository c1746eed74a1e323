package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	tinyOnce sync.Once
	tinyM    *model.Model
)

func tiny() *model.Model {
	tinyOnce.Do(func() {
		m, err := model.NewBuiltin("tiny", 1)
		if err != nil {
			panic(err)
		}
		tinyM = m
	})
	return tinyM
}

type testServer struct {
	url  string
	eng  *engine.Engine
	srv  *Server
	stop func()
}

// start runs a server on 127.0.0.1:0 and waits until /health is 200.
func start(t *testing.T, mod func(*engine.Config)) *testServer {
	t.Helper()
	cfg := engine.Config{Model: tiny(), NumBlocks: 128}
	if mod != nil {
		mod(&cfg)
	}
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Engine: eng, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	ts := &testServer{url: "http://" + ln.Addr().String(), eng: eng, srv: srv}
	ts.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
	t.Cleanup(func() {
		ts.stop()
		http.DefaultClient.CloseIdleConnections()
	})
	waitfor.Cond(t, 30*time.Second, "condition", func() bool {
		resp, err := http.Get(ts.url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return ts
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("response is not JSON: %q", b)
	}
	return resp.StatusCode, v
}

func choice(v map[string]any) map[string]any { return v["choices"].([]any)[0].(map[string]any) }

func TestCompletionDeterministicAndUsage(t *testing.T) {
	ts := start(t, nil)
	body := `{"model":"tiny","prompt":"Hello, world","max_tokens":12,"temperature":0,"return_token_ids":true,"ignore_eos":true}`
	code, a := post(t, ts.url+"/v1/completions", body)
	if code != 200 {
		t.Fatalf("status %d: %v", code, a)
	}
	_, b := post(t, ts.url+"/v1/completions", body)
	ca, cb := choice(a), choice(b)
	if fmt.Sprint(ca["token_ids"]) != fmt.Sprint(cb["token_ids"]) || ca["text"] != cb["text"] {
		t.Fatalf("greedy outputs differ: %v vs %v", ca, cb)
	}
	if ca["finish_reason"] != "length" || len(ca["token_ids"].([]any)) != 12 {
		t.Fatalf("choice %v", ca)
	}
	u := b["usage"].(map[string]any)
	if u["prompt_tokens"].(float64) != 13 || u["completion_tokens"].(float64) != 12 || u["total_tokens"].(float64) != 25 {
		t.Fatalf("usage %v", u)
	}
	// The second run hits the prefix cache (13-token prompt: none full... use a longer one).
	long := strings.Repeat("abcdefgh", 8)
	post(t, ts.url+"/v1/completions", `{"prompt":"`+long+`","max_tokens":2,"temperature":0}`)
	_, c := post(t, ts.url+"/v1/completions", `{"prompt":"`+long+`","max_tokens":2,"temperature":0}`)
	if got := c["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64); got != 64 {
		t.Fatalf("cached tokens %v want 64", got)
	}
	// Token-id prompts work and match the text prompt's ids.
	ids, _ := json.Marshal(tokenizer.ByteLevel{}.Encode("Hello, world", true))
	_, d := post(t, ts.url+"/v1/completions", `{"prompt":`+string(ids)+`,"max_tokens":12,"temperature":0,"return_token_ids":true,"ignore_eos":true}`)
	if fmt.Sprint(choice(d)["token_ids"]) != fmt.Sprint(ca["token_ids"]) {
		t.Fatal("token-id prompt gave different tokens")
	}
}

// sse reads an SSE response and returns the decoded data events; it
// fails unless the stream ends with [DONE].
func sse(t *testing.T, resp *http.Response) []map[string]any {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var events []map[string]any
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("bad SSE line %q", line)
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("bad event %q", data)
		}
		events = append(events, v)
	}
	if !done {
		t.Fatal("stream did not end with [DONE]")
	}
	return events
}

func TestStreamingMatchesNonStreaming(t *testing.T) {
	ts := start(t, nil)
	for _, ep := range []struct{ path, body, field string }{
		{"/v1/completions", `"prompt":"stream me","max_tokens":20,"temperature":0,"ignore_eos":true`, "text"},
		{"/v1/chat/completions", `"messages":[{"role":"user","content":"hi"}],"max_tokens":20,"temperature":0,"ignore_eos":true`, "content"},
	} {
		t.Run(ep.path, func(t *testing.T) {
			code, whole := post(t, ts.url+ep.path, "{"+ep.body+"}")
			if code != 200 {
				t.Fatalf("status %d %v", code, whole)
			}
			resp, err := http.Post(ts.url+ep.path, "application/json", strings.NewReader(`{`+ep.body+`,"stream":true,"stream_options":{"include_usage":true}}`))
			if err != nil {
				t.Fatal(err)
			}
			events := sse(t, resp)
			var text strings.Builder
			var reason any
			var usage map[string]any
			for _, ev := range events {
				if u, ok := ev["usage"].(map[string]any); ok {
					usage = u
				}
				chs := ev["choices"].([]any)
				if len(chs) == 0 {
					continue
				}
				c := chs[0].(map[string]any)
				if ep.field == "text" {
					text.WriteString(c["text"].(string))
				} else if d, ok := c["delta"].(map[string]any); ok {
					if s, ok := d["content"].(string); ok {
						text.WriteString(s)
					}
				}
				if c["finish_reason"] != nil {
					reason = c["finish_reason"]
				}
			}
			var want string
			if ep.field == "text" {
				want = choice(whole)["text"].(string)
			} else {
				want = choice(whole)["message"].(map[string]any)["content"].(string)
			}
			if text.String() != want || reason != "length" {
				t.Fatalf("streamed %q (%v), want %q", text.String(), reason, want)
			}
			if usage == nil || usage["completion_tokens"].(float64) != 20 {
				t.Fatalf("usage %v", usage)
			}
		})
	}
}

func TestStopString(t *testing.T) {
	ts := start(t, nil)
	// Find a greedy output with two consecutive ASCII letters or digits to use as a stop string.
	for i := 0; i < 20; i++ {
		prompt := fmt.Sprintf("prompt number %d", i)
		_, v := post(t, ts.url+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":24,"temperature":0,"ignore_eos":true,"return_token_ids":true}`)
		var toks []int
		for _, x := range choice(v)["token_ids"].([]any) {
			toks = append(toks, int(x.(float64)))
		}
		for k := 1; k+1 < len(toks); k++ {
			if isAlnum(toks[k]) && isAlnum(toks[k+1]) {
				stop := string([]byte{byte(toks[k]), byte(toks[k+1])})
				_, s := post(t, ts.url+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":24,"temperature":0,"ignore_eos":true,"stop":["zz#",`+fmt.Sprintf("%q", stop)+`]}`)
				c := choice(s)
				text := c["text"].(string)
				if c["finish_reason"] != "stop" || strings.Contains(text, stop) {
					t.Fatalf("stop %q: %v", stop, c)
				}
				return
			}
		}
	}
	t.Fatal("no greedy output with an ASCII pair found")
}

func isAlnum(t int) bool {
	return (t >= 'a' && t <= 'z') || (t >= 'A' && t <= 'Z') || (t >= '0' && t <= '9')
}

func TestBadInput(t *testing.T) {
	ts := start(t, func(c *engine.Config) { c.MaxModelLen = 256 })
	long := strings.Repeat("x", 300)
	tests := []struct {
		name, path, body string
		code             int
		param, msg       string // when set: the error's "param" and a part of its message
	}{
		{"malformed json", "/v1/completions", `{"prompt":`, 400, "", ""},
		{"not an object", "/v1/completions", `[1,2]`, 400, "", ""},
		{"unknown field", "/v1/completions", `{"prompt":"a","bogus":1}`, 400, "", ""},
		{"wrong type", "/v1/completions", `{"prompt":"a","max_tokens":"ten"}`, 400, "max_tokens", "max_tokens must be an integer"},
		{"temperature NaN", "/v1/completions", `{"prompt":"a","temperature":"NaN"}`, 400, "temperature", "temperature must be a finite number"},
		{"temperature overflows", "/v1/completions", `{"prompt":"a","temperature":1e999}`, 400, "temperature", "temperature must be a finite number"},
		{"chat temperature NaN", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"temperature":"NaN"}`, 400, "temperature", "temperature must be a finite number"},
		{"stream not a bool", "/v1/completions", `{"prompt":"a","stream":1}`, 400, "stream", "stream must be a boolean"},
		{"prompt wrong type", "/v1/completions", `{"prompt":{"a":1}}`, 400, "", ""},
		{"missing prompt", "/v1/completions", `{"max_tokens":3}`, 400, "", ""},
		{"empty prompt", "/v1/completions", `{"prompt":""}`, 400, "", ""},
		{"empty token prompt", "/v1/completions", `{"prompt":[]}`, 400, "", ""},
		{"token out of vocab", "/v1/completions", `{"prompt":[1,100000]}`, 400, "", ""},
		{"prompt longer than context", "/v1/completions", `{"prompt":"` + long + `"}`, 400, "", ""},
		{"max_tokens zero", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, "max_tokens", "max_tokens must be at least 1"},
		{"max_tokens negative", "/v1/completions", `{"prompt":"a","max_tokens":-5}`, 400, "", ""},
		{"max_tokens too large", "/v1/completions", `{"prompt":"a","max_tokens":100000}`, 400, "", ""},
		{"prompt plus max_tokens too large", "/v1/completions", `{"prompt":"abc","max_tokens":255}`, 400, "", ""},
		{"unknown model", "/v1/completions", `{"model":"gpt-9","prompt":"a"}`, 404, "", ""},
		{"n=2", "/v1/completions", `{"prompt":"a","n":2}`, 400, "", ""},
		{"temperature negative", "/v1/completions", `{"prompt":"a","temperature":-1}`, 400, "temperature", "temperature must be in [0, 2]"},
		{"batch prompt", "/v1/completions", `{"prompt":["a","b"]}`, 400, "", ""},
		{"trailing data", "/v1/completions", `{"prompt":"a"} {}`, 400, "", ""},
		{"chat no messages", "/v1/chat/completions", `{"messages":[]}`, 400, "", ""},
		{"chat bad role", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"x"}]}`, 400, "", ""},
		{"chat image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "", ""},
		{"chat unknown model", "/v1/chat/completions", `{"model":"x","messages":[{"role":"user","content":"x"}]}`, 404, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, v := post(t, ts.url+tc.path, tc.body)
			if code != tc.code {
				t.Fatalf("status %d want %d: %v", code, tc.code, v)
			}
			e, ok := v["error"].(map[string]any)
			if !ok || e["message"] == "" || e["type"] == "" || e["code"] != float64(tc.code) || len(v) != 1 || len(e) != 4 {
				t.Fatalf("not an OpenAI error {message, type, param, code}: %v", v)
			}
			if _, ok := e["param"]; !ok {
				t.Fatalf("no param: %v", e)
			}
			msg, _ := e["message"].(string)
			if strings.Contains(msg, "commonParams") || strings.Contains(msg, "float64") {
				t.Fatalf("message names an internal type: %q", msg)
			}
			if tc.param != "" && (e["param"] != tc.param || !strings.Contains(msg, tc.msg)) {
				t.Fatalf("param %v message %q, want %q and %q", e["param"], msg, tc.param, tc.msg)
			}
		})
	}
	// Still serving.
	if code, v := post(t, ts.url+"/v1/completions", `{"prompt":"ok","max_tokens":2}`); code != 200 {
		t.Fatalf("after bad input: %d %v", code, v)
	}
	resp, err := http.Get(ts.url + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown route: %d", resp.StatusCode)
	}
}

// holdConnector parks requests by their kv_transfer_params: "pending"
// keeps them waiting, "remote" admits them (blocks allocated) as an async
// load that never completes. This makes queue and disconnect tests
// independent of timing.
type holdConnector struct{ engine.NoopConnector }

func (holdConnector) GetNumNewMatchedTokens(req *engine.ReqState, numLocal int) (int, bool, error) {
	switch req.KVTransferParams()["hold"] {
	case "pending":
		return engine.MatchPending, false, nil
	case "remote":
		return len(req.PromptTokens()) - numLocal, true, nil
	}
	return 0, false, nil
}

// background posts body with a cancellable context and reports the status
// (0 if the client gave up).
func background(url, body string) (cancel func(), status <-chan int) {
	ctx, cancelFn := context.WithCancel(context.Background())
	ch := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- 0
			return
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		ch <- r.StatusCode
	}()
	return cancelFn, ch
}

func TestQueueFullAndDisconnect(t *testing.T) {
	ts := start(t, func(c *engine.Config) { c.MaxWaiting = 1; c.Connector = holdConnector{} })
	// A holds KV blocks while it waits for a remote load that never comes.
	cancelA, doneA := background(ts.url+"/v1/completions", `{"prompt":"`+strings.Repeat("a", 40)+`","max_tokens":3,"kv_transfer_params":{"hold":"remote"}}`)
	defer cancelA()
	waitfor.Cond(t, 30*time.Second, "condition", func() bool { s := ts.eng.Stats(); return s.WaitingForRemote == 1 && s.BlocksUsed == 3 })
	// B fills the one-slot waiting queue; C is rejected with 429.
	cancelB, doneB := background(ts.url+"/v1/completions", `{"prompt":"b","max_tokens":3,"stream":true,"kv_transfer_params":{"hold":"pending"}}`)
	defer cancelB()
	waitfor.Cond(t, 30*time.Second, "condition", func() bool { return ts.eng.Stats().Waiting == 1 })
	code, v := post(t, ts.url+"/v1/completions", `{"prompt":"c","max_tokens":3}`)
	if code != 429 || v["error"] == nil {
		t.Fatalf("want 429, got %d %v", code, v)
	}
	// Clients that disconnect abort their requests; A's blocks are freed.
	cancelA()
	cancelB()
	if a, b := <-doneA, <-doneB; a != 0 || b != 200 { // B's SSE headers were already sent
		t.Fatalf("statuses after disconnect: %d %d", a, b)
	}
	waitfor.Cond(t, 30*time.Second, "condition", func() bool {
		s := ts.eng.Stats()
		return s.Waiting+s.WaitingForRemote+s.Running == 0 && s.BlocksUsed == 0
	})
	// Still serving.
	if code, v := post(t, ts.url+"/v1/completions", `{"prompt":"ok","max_tokens":3}`); code != 200 {
		t.Fatalf("after disconnects: %d %v", code, v)
	}
	mresp, err := http.Get(ts.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`mooncake_engine_requests_total{finish_reason="abort"} 2`,
		`mooncake_engine_requests_total{finish_reason="rejected"} 1`,
		`mooncake_engine_kv_blocks_used 0`,
		`mooncake_engine_kv_blocks_free 128`,
		"mooncake_engine_time_to_first_token_seconds_count 1",
		"mooncake_engine_time_per_output_token_seconds_bucket",
		"mooncake_engine_prefix_cache_hit_rate",
		"mooncake_engine_requests_running 0",
		"mooncake_engine_requests_waiting 0",
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// paramsConnector records the kv_transfer_params it sees and returns its own.
type paramsConnector struct {
	engine.NoopConnector
	mu   sync.Mutex
	seen map[string]map[string]any
}

func (c *paramsConnector) GetNumNewMatchedTokens(req *engine.ReqState, n int) (int, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[req.ID()] = req.KVTransferParams()
	return 0, false, nil
}

func (c *paramsConnector) RequestFinished(req *engine.ReqState, blocks []int) (bool, map[string]any) {
	return false, map[string]any{"remote_block_ids": blocks, "echo": req.KVTransferParams()["transfer_id"]}
}

func TestKVTransferParams(t *testing.T) {
	pc := &paramsConnector{seen: map[string]map[string]any{}}
	ts := start(t, func(c *engine.Config) { c.Connector = pc })
	req, _ := http.NewRequest("POST", ts.url+"/v1/completions",
		strings.NewReader(`{"prompt":"abc","max_tokens":1,"kv_transfer_params":{"do_remote_decode":true,"transfer_id":"xfer-1"}}`))
	req.Header.Set("X-Request-Id", "req-42")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	kv, ok := v["kv_transfer_params"].(map[string]any)
	if !ok || kv["echo"] != "xfer-1" || len(kv["remote_block_ids"].([]any)) != 1 {
		t.Fatalf("response kv_transfer_params %v", v["kv_transfer_params"])
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.seen["req-42"]["do_remote_decode"] != true || v["id"] != "req-42" {
		t.Fatalf("connector saw %v; id %v", pc.seen, v["id"])
	}
}

func TestModelsAndHealth(t *testing.T) {
	ts := start(t, nil)
	resp, err := http.Get(ts.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if d := v["data"].([]any)[0].(map[string]any); d["id"] != "tiny" || d["object"] != "model" {
		t.Fatalf("models %v", v)
	}
	ts.stop()
	ts.stop = func() {}
	if _, err := http.Get(ts.url + "/health"); err == nil {
		t.Fatal("health answered after shutdown")
	}
}

func TestTextStateStops(t *testing.T) {
	tk := tokenizer.ByteLevel{}
	st := newTextState(tk, []string{"END"})
	var got strings.Builder
	for _, b := range []byte("helloEN") {
		got.WriteString(st.add([]int{int(b)}))
	}
	if got.String() != "hello" {
		t.Fatalf("held-back text wrong: %q", got.String())
	}
	got.WriteString(st.add([]int{'D'}))
	got.WriteString(st.finish())
	if got.String() != "hello" {
		t.Fatalf("stop string not trimmed: %q", got.String())
	}
	st = newTextState(tk, nil)
	s := st.add(tk.Encode("é", false)[:1]) + st.add(tk.Encode("é", false)[1:]) + st.finish()
	if s != "é" {
		t.Fatalf("utf-8 split: %q", s)
	}
}

func FuzzParseRequests(f *testing.F) {
	f.Add([]byte(`{"prompt":"hi","max_tokens":3,"stop":["a"],"seed":1}`))
	f.Add([]byte(`{"prompt":[1,2,3],"temperature":0.5,"kv_transfer_params":{"x":1}}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`))
	f.Add([]byte(`{"prompt":`))
	eng, err := engine.New(engine.Config{Model: tiny(), NumBlocks: 16})
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(Config{Engine: eng})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, parse := range []func(io.Reader, string) (*job, error){s.parseCompletion, s.parseChat} {
			j, err := parse(bytes.NewReader(body), "id")
			if err != nil {
				if code, _ := errorStatus(err); code != 400 && code != 404 {
					t.Fatalf("parse error maps to %d: %v", code, err)
				}
				continue
			}
			if len(j.req.Prompt) == 0 || j.req.Params.MaxTokens < 1 {
				t.Fatalf("accepted an unusable request: %+v", j.req)
			}
		}
	})
}
