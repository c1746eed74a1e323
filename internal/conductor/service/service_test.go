package service

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/conductor"
	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/kvevents/kvleak"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, kvleak.IgnoreZMQ()...)
}

// start runs a service on a loopback port until the test ends.
func start(t *testing.T) (*Service, string) {
	t.Helper()
	s := New(Config{ReplayTimeout: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Run(ctx, ln); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return s, "http://" + ln.Addr().String()
}

// publisher runs a kvevents publisher (PUB and replay) until the test ends.
func publisher(t *testing.T, cfg kvevents.Config) *kvevents.Publisher {
	t.Helper()
	if cfg.Endpoint == "" {
		cfg.Endpoint = "tcp://127.0.0.1:0"
	}
	p, err := kvevents.NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-p.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("publisher not ready")
	}
	return p
}

func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: body %q is not a JSON object: %v", method, url, raw, err)
	}
	return resp.StatusCode, out
}

func asJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The endpoints against the examples of Mooncake's Indexer API doc, with a
// real publisher over ZMQ.
func TestContractRegisterQueryUnregister(t *testing.T) {
	s, base := start(t)
	pub := publisher(t, kvevents.Config{ReplayEndpoint: "tcp://127.0.0.1:0", BlockSize: 64, MapEncoding: true})
	ep, rep := pub.Endpoints()
	// /register: the doc's body (block_size 64, the query example's; the
	// doc's register example says 128, and a query of another block size
	// is refused: see the error cases).
	reg := map[string]any{"endpoint": ep, "replay_endpoint": rep, "type": "vLLM", "modelname": "deepseek",
		"lora_name": "sql-adapter", "tenant_id": "default", "instance_id": "vllm-prefill-node1", "block_size": 64,
		"dp_rank": 0, "additionalsalt": "w8a8"}
	code, got := call(t, "POST", base+"/register", asJSON(t, reg))
	if want := map[string]any{"status": "registered successfully", "instance_id": "vllm-prefill-node1"}; code != 200 || !reflect.DeepEqual(got, want) {
		t.Fatalf("register: %d %v", code, got)
	}
	// The engine stores 3 blocks of 64 tokens (its own hashes, vLLM form,
	// with the registration's adapter) on the device, 4 on the host.
	prompt := make([]int, 5*64)
	for i := range prompt {
		prompt[i] = 1000 + i
	}
	stored := func(n int, medium string) kvevents.BlockStored {
		var hs []kvevents.Hash
		for i := 0; i < n; i++ {
			hs = append(hs, kvevents.BytesHash([]byte{byte(i), 0xab}))
		}
		return kvevents.BlockStored{BlockHashes: hs, TokenIDs: prompt[:n*64], BlockSize: 64, Medium: medium, LoraName: "sql-adapter"}
	}
	pub.Publish(stored(3, "GPU"))
	pub.Publish(stored(4, "CPU"))
	query := map[string]any{"model": "deepseek", "lora_name": "sql-adapter", "token_ids": prompt, "tenant_id": "default",
		"instance_id": "vllm-prefill-node1", "block_size": 64, "cache_salt": "w8a8"}
	want := map[string]any{"default": map[string]any{"vllm-prefill-node1": map[string]any{
		"longest_matched": 256.0, "GPU": 192.0, "CPU": 256.0, "DISK": 256.0,
		"DP": map[string]any{"0": 256.0}, "rank_matches": map[string]any{"0": map[string]any{"GPU": 192.0, "CPU": 256.0, "DISK": 256.0}}}}}
	// The subscriber may connect after those were sent: the next batch
	// shows it a gap, which it fills from the replay socket.
	waitfor.Cond(t, 10*time.Second, "the events indexed", func() bool {
		pub.Publish()
		_, got := call(t, "POST", base+"/query", asJSON(t, query))
		return reflect.DeepEqual(got, want)
	})
	// The doc's /query example itself: 5 tokens, no complete block of 64.
	code, got = call(t, "POST", base+"/query", `{"model": "deepseek", "lora_name": "sql-adapter", "token_ids": [101, 15, 100, 55, 89],
		"tenant_id": "default", "instance_id": "vllm-prefill-node1", "block_size": 64, "cache_salt": "w8a8"}`)
	zero := map[string]any{"default": map[string]any{"vllm-prefill-node1": map[string]any{"longest_matched": 0.0, "GPU": 0.0, "CPU": 0.0, "DISK": 0.0,
		"DP": map[string]any{"0": 0.0}, "rank_matches": map[string]any{"0": map[string]any{"GPU": 0.0, "CPU": 0.0, "DISK": 0.0}}}}}
	if code != 200 || !reflect.DeepEqual(got, zero) {
		t.Fatalf("doc query: %d %v", code, got)
	}
	// /query_by_hash: the same prefix by its standard hashes (and the
	// legacy name block_hash); longest_matched = block_size * hashes matched.
	seqs := conductor.NewHasher(conductor.DefaultSeed).SeqHashes(conductor.Tokens32(prompt), 64)
	for _, name := range []string{"seq_hashes", "block_hash"} {
		q := map[string]any{"model": "deepseek", "lora_name": "sql-adapter", name: seqs, "tenant_id": "default",
			"instance_id": "vllm-prefill-node1", "block_size": 64, "cache_salt": "w8a8"}
		if code, got := call(t, "POST", base+"/query_by_hash", asJSON(t, q)); code != 200 || !reflect.DeepEqual(got, want) {
			t.Fatalf("query_by_hash (%s): %d %v", name, code, got)
		}
	}
	// /global_view lists the context.
	code, got = call(t, "GET", base+"/global_view", "")
	ctxs, _ := got["contexts"].([]any)
	if code != 200 || got["context_count"] != 1.0 || len(ctxs) != 1 {
		t.Fatalf("global_view: %d %v", code, got)
	}
	c0 := ctxs[0].(map[string]any)
	if c0["model_name"] != "deepseek" || c0["lora_name"] != "sql-adapter" || c0["additional_salt"] != "w8a8" || c0["block_size"] != 64.0 ||
		c0["prefix_count"] != 4.0 || !reflect.DeepEqual(c0["instances"], map[string]any{"vllm-prefill-node1": []any{0.0}}) {
		t.Fatalf("global_view context: %v", c0)
	}
	// /metrics shows the publisher's stream.
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{`mooncake_conductor_event_blocks_total{publisher="vllm-prefill-node1|default|0",result="stored"} 7`,
		`mooncake_conductor_blocks 4`, `mooncake_conductor_requests_total{code="200",endpoint="query"}`} {
		if !bytes.Contains(m, []byte(line)) {
			t.Fatalf("metrics lack %q:\n%s", line, m)
		}
	}
	// /api/summary (the dashboard's data) and the page.
	code, got = call(t, "GET", base+"/api/summary", "")
	pubs, _ := got["publishers"].([]any)
	if code != 200 || got["blocks"] != 4.0 || got["context_count"] != 1.0 || len(pubs) != 1 || got["seed"] != 1337.0 {
		t.Fatalf("summary: %d %v", code, got)
	}
	if p0 := pubs[0].(map[string]any); p0["key"] != "vllm-prefill-node1|default|0" || p0["stored"] != 7.0 || p0["blocks"] != 7.0 || p0["type"] != "vLLM" {
		t.Fatalf("summary publisher: %v", p0)
	}
	if q := got["queries"].(map[string]any); q["200"].(float64) < 3 {
		t.Fatalf("summary queries: %v", q)
	}
	resp, err = http.Get(base + "/dashboard/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(page, []byte("<title>Mooncake conductor</title>")) {
		t.Fatalf("dashboard: %d %.200s", resp.StatusCode, page)
	}
	// /unregister: the doc's body.
	code, got = call(t, "POST", base+"/unregister", `{"type": "vLLM", "modelname": "deepseek", "lora_name": "sql-adapter",
		"tenant_id": "default", "instance_id": "vllm-prefill-node1", "block_size": 128, "dp_rank": 0}`)
	if want := map[string]any{"status": "unregistered successfully", "removed_instances": []any{"vllm-prefill-node1|default|0"}}; code != 200 || !reflect.DeepEqual(got, want) {
		t.Fatalf("unregister: %d %v", code, got)
	}
	if s.Index().Blocks() != 0 || len(s.SubStats()) != 0 {
		t.Fatalf("after unregister: %d blocks, %d subscribers", s.Index().Blocks(), len(s.SubStats()))
	}
}

// Every error answers 4xx with a reason, and the service keeps serving.
func TestContractErrors(t *testing.T) {
	_, base := start(t)
	pub := publisher(t, kvevents.Config{BlockSize: 16})
	ep, _ := pub.Endpoints()
	ok := map[string]any{"endpoint": ep, "type": "SGLang", "modelname": "m", "instance_id": "a", "block_size": 16, "dp_rank": 0}
	if code, got := call(t, "POST", base+"/register", asJSON(t, ok)); code != 200 {
		t.Fatalf("register: %d %v", code, got)
	}
	with := func(k string, v any) string {
		m := map[string]any{}
		for a, b := range ok {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return asJSON(t, m)
	}
	for _, c := range []struct {
		method, path, body string
		code               int
		reason, field      string
	}{
		{"POST", "/register", `not json`, 400, "invalid_json", ""},
		{"POST", "/register", `[1]`, 400, "invalid_json", ""},
		{"POST", "/register", with("endpoint", nil), 400, "missing", "endpoint"},
		{"POST", "/register", with("modelname", nil), 400, "missing", "modelname"},
		{"POST", "/register", with("instance_id", ""), 400, "invalid_value", "instance_id"},
		{"POST", "/register", with("block_size", nil), 400, "missing", "block_size"},
		{"POST", "/register", with("block_size", 0), 400, "invalid_value", "block_size"},
		{"POST", "/register", with("block_size", "16"), 400, "invalid_type", "block_size"},
		{"POST", "/register", with("dp_rank", nil), 400, "missing", "dp_rank"},
		{"POST", "/register", with("dp_rank", -1), 400, "invalid_value", "dp_rank"},
		{"POST", "/register", with("type", "TensorRT"), 400, "invalid_value", "type"},
		{"POST", "/register", with("endpoint", "http://x"), 400, "invalid_registration", ""},
		{"POST", "/unregister", `{"instance_id": "zz", "dp_rank": 0}`, 404, "not_found", ""},
		{"POST", "/unregister", `{"instance_id": "a"}`, 400, "missing", "dp_rank"},
		{"POST", "/query", `{"block_size": 16, "token_ids": [1]}`, 400, "missing", "model"},
		{"POST", "/query", `{"model": "m", "token_ids": [1]}`, 400, "missing", "block_size"},
		{"POST", "/query", `{"model": "m", "block_size": 16}`, 400, "missing", "token_ids"},
		{"POST", "/query", `{"model": "m", "block_size": 16, "token_ids": [-1]}`, 400, "invalid_type", "token_ids"},
		{"POST", "/query", `{"model": "m", "block_size": 32, "token_ids": [1]}`, 400, "block_size_mismatch", "block_size"},
		{"POST", "/query", `{"model": "m", "block_size": 16, "token_ids": [1], "instance_id": "nope"}`, 404, "unknown_instance", "instance_id"},
		{"POST", "/query", `{"model": "m", "block_size": 16, "token_ids": [1], "lora_name": "x", "lora_id": 3}`, 400, "invalid_value", "lora_id"},
		{"POST", "/query", `{"model": "m", "block_size": 16, "token_ids": [1], "mm_features": "img"}`, 400, "invalid_type", "mm_features"},
		{"POST", "/query", `{"model": "m", "block_size": 16, "token_ids": [1], "mm_features": [{"offset": 0, "length": 4}]}`, 400, "invalid_value", "mm_features"},
		{"POST", "/query", `{"model": "m", "block_size": 16, "token_ids": [1], "mm_features": [{"identifier": "i", "offset": 0, "length": 0}]}`, 400, "invalid_value", "mm_features"},
		{"POST", "/query_by_hash", `{"model": "m", "block_size": 16}`, 400, "missing", "seq_hashes"},
		{"POST", "/query_by_hash", `{"model": "m", "block_size": 16, "seq_hashes": ["x"]}`, 400, "invalid_type", "seq_hashes"},
		{"GET", "/query", ``, 405, "method_not_allowed", ""},
		{"POST", "/global_view", `{}`, 405, "method_not_allowed", ""},
	} {
		code, got := call(t, c.method, base+c.path, c.body)
		field, _ := got["field"].(string)
		if code != c.code || got["reason"] != c.reason || field != c.field || got["error"] == "" {
			t.Errorf("%s %s %s: %d %v, want %d %s %s", c.method, c.path, c.body, code, got, c.code, c.reason, c.field)
		}
	}
	// multimodal inputs are accepted
	if code, got := call(t, "POST", base+"/query", `{"model": "m", "block_size": 16, "token_ids": [1], "mm_features": [{"identifier": "i", "offset": 0, "length": 4}]}`); code != 200 {
		t.Fatalf("query with mm_features: %d %v", code, got)
	}
	// still serving; an unknown model is an empty answer, not an error.
	code, got := call(t, "POST", base+"/query", `{"model": "other", "block_size": 16, "token_ids": [1, 2]}`)
	if code != 200 || !reflect.DeepEqual(got, map[string]any{"default": map[string]any{}}) {
		t.Fatalf("unknown model: %d %v", code, got)
	}
}

// Registering a key again with another endpoint moves the subscription:
// the old publisher's blocks are forgotten and its later events ignored.
func TestReregisterMovesSubscription(t *testing.T) {
	s, base := start(t)
	p1 := publisher(t, kvevents.Config{ReplayEndpoint: "tcp://127.0.0.1:0", BlockSize: 4})
	p2 := publisher(t, kvevents.Config{ReplayEndpoint: "tcp://127.0.0.1:0", BlockSize: 4})
	reg := func(p *kvevents.Publisher) {
		ep, rep := p.Endpoints()
		body := asJSON(t, map[string]any{"endpoint": ep, "replay_endpoint": rep, "type": "vLLM", "modelname": "m", "instance_id": "a", "block_size": 4, "dp_rank": 0})
		if code, got := call(t, "POST", base+"/register", body); code != 200 {
			t.Fatalf("register: %d %v", code, got)
		}
	}
	k := conductor.StreamKey{Instance: "a", Tenant: "default"}
	stored := func(p *kvevents.Publisher, first int) {
		p.Publish(kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.IntHash(uint64(first))}, TokenIDs: []int{first, 2, 3, 4}, BlockSize: 4})
	}
	reg(p1)
	stored(p1, 1)
	waitfor.Cond(t, 10*time.Second, "p1's block", func() bool { p1.Publish(); return s.Index().Stats()[k].Live == 1 })
	reg(p1) // the same: nothing changes
	if s.Index().Stats()[k].Live != 1 {
		t.Fatal("an identical registration dropped the blocks")
	}
	reg(p2)
	if st := s.Index().Stats()[k]; st.Live != 0 {
		t.Fatalf("after moving: %+v", st)
	}
	stored(p2, 7)
	waitfor.Cond(t, 10*time.Second, "p2's block", func() bool { p2.Publish(); return s.Index().Stats()[k].BlocksStored == 1 })
	stored(p1, 9)
	p1.Publish()
	stored(p2, 8)
	waitfor.Cond(t, 10*time.Second, "p2's second block", func() bool { p2.Publish(); return s.Index().Stats()[k].BlocksStored == 2 })
	if st := s.Index().Stats()[k]; st.Live != 2 || len(s.SubStats()) != 1 {
		t.Fatalf("p1's events reached the moved registration: %+v, %d subscribers", st, len(s.SubStats()))
	}
}
