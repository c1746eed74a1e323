package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/conductor"
	"github.com/kvcache-go/mooncake/internal/conductor/service"
	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestParseIndexerAnswer(t *testing.T) {
	for _, c := range []struct {
		body string
		want map[string]TierBlocks
	}{
		{`{"default": {"a": {"longest_matched": 256, "GPU": 128, "DP": {"0": 128}, "CPU": 256, "DISK": 0}}}`, map[string]TierBlocks{"a": {2, 4, 4}}},
		{`{"instances": {"a": {"longest_matched": 64, "gpu": 64, "cpu": 64, "disk": 64}, "b": {"longest_matched": 192}}}`,
			map[string]TierBlocks{"a": {1, 1, 1}, "b": {0, 0, 3}}},
		{`{"default": {}}`, map[string]TierBlocks{}},
	} {
		got, err := parseIndexerAnswer([]byte(c.body), 64)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v %v, want %v", c.body, got, err, c.want)
		}
	}
	for _, bad := range []string{`[]`, `{"default": 3}`, `{"instances": []}`} {
		if _, err := parseIndexerAnswer([]byte(bad), 64); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// Tiers weigh: a device prefix beats the same prefix on the host, which
// beats the same on disk, which beats nothing; the conductor loads a
// host prefix when that beats recomputing it.
func TestPoliciesWeighTiers(t *testing.T) {
	blocks := make([]uint64, 10)
	kv := NewKVAware(KVAwareConfig{})
	for _, c := range []struct {
		a, b TierBlocks
		want int
	}{
		{TierBlocks{8, 8, 8}, TierBlocks{0, 8, 8}, 0},
		{TierBlocks{0, 0, 8}, TierBlocks{0, 8, 8}, 1},
		{TierBlocks{0, 0, 0}, TierBlocks{0, 0, 4}, 1},
		{TierBlocks{2, 2, 2}, TierBlocks{0, 8, 8}, 1}, // 6 host blocks at 0.75 beat 2 on device
	} {
		a, b := c.a, c.b
		if got := kv.Pick(blocks, []Load{{ID: "a", Cached: &a}, {ID: "b", Cached: &b}}); got != c.want {
			t.Errorf("kvcache-aware %v vs %v: picked %d, want %d", c.a, c.b, got, c.want)
		}
	}
	cond := NewConductor(ConductorConfig{BlockBytes: 16})
	dev, host, none := TierBlocks{8, 8, 8}, TierBlocks{0, 8, 8}, TierBlocks{}
	p := cond.Plan(blocks, 160, []Load{{ID: "a", Cached: &none}, {ID: "b", Cached: &host}, {ID: "c", Cached: &dev}})
	if p.Index != 2 || p.PrefixTokens != 128 {
		t.Fatalf("conductor: %+v", p)
	}
	p = cond.Plan(blocks, 160, []Load{{ID: "a", Cached: &none}, {ID: "b", Cached: &host}})
	m := DefaultCostModel()
	if want := m.Prefill(32, 128) + m.Load(128, 0); p.Index != 1 || p.PrefixTokens != 128 || p.Prefill < want-1e-12 || p.Prefill > want+1e-12 {
		t.Fatalf("conductor host: %+v (want prefill %v)", p, want)
	}
	// Disk slower than recomputing: not taken.
	slowDisk := NewConductor(ConductorConfig{BlockBytes: 16, Cost: CostModel{Fixed: 0.01, PerToken: 1e-5, DiskPerToken: 1e-4}})
	disk := TierBlocks{0, 0, 8}
	if p := slowDisk.Plan(blocks, 160, []Load{{ID: "a", Cached: &disk}}); p.PrefixTokens != 0 {
		t.Fatalf("slow disk taken: %+v", p)
	}
}

// The proxy routes with a remote `mooncake conductor` over HTTP, fed by a
// real ZMQ publisher: the prompt goes to the instance holding it.
func TestProxyRoutesWithRemoteIndexer(t *testing.T) {
	svc := service.New(service.Config{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); svc.Run(ctx, ln) }()
	defer func() { cancel(); wg.Wait() }()
	indexURL := "http://" + ln.Addr().String()

	pub, err := kvevents.NewPublisher(kvevents.Config{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); pub.Run(ctx) }()
	<-pub.Ready()
	ep, rep := pub.Endpoints()

	a, b, d := newFake(t, true), newFake(t, true), newFake(t, false, "x")
	for _, r := range []struct{ id, ep string }{{"engine-a", "tcp://127.0.0.1:1"}, {"engine-b", ep}} {
		body, _ := json.Marshal(map[string]any{"endpoint": r.ep, "replay_endpoint": rep, "type": "vLLM", "modelname": "tiny",
			"instance_id": r.id, "block_size": 16, "dp_rank": 0})
		resp, err := http.Post(indexURL+"/register", "application/json", strings.NewReader(string(body)))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("register %s: %v %v", r.id, err, resp)
		}
		resp.Body.Close()
	}
	prompt := strings.Repeat("This prefix is cached on engine b, the indexer knows it. ", 3)
	toks := tokenizer.ByteLevel{}.Encode(prompt, true)
	n := len(toks) / 16
	var hs []kvevents.Hash
	for i := 0; i < n; i++ {
		hs = append(hs, kvevents.IntHash(uint64(1000+i)))
	}
	pub.Publish(kvevents.BlockStored{BlockHashes: hs, TokenIDs: toks[:16*n], BlockSize: 16, Medium: "GPU"})
	waitfor.Cond(t, 10*time.Second, "the indexer holds b's blocks", func() bool {
		pub.Publish()
		return svc.Index().Blocks() == n
	})

	p, err := New(Config{Prefill: []string{a.spec() + ",id=engine-a", b.spec() + ",id=engine-b"}, Decode: []string{d.srv.URL},
		PrefillPolicy: PolicyConductor, Indexer: IndexerConfig{URL: indexURL}, HealthInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pl, _ := net.Listen("tcp", "127.0.0.1:0")
	pctx, pcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx, pl) }()
	defer func() { pcancel(); <-done }()
	waitfor.Cond(t, 10*time.Second, "proxy ready", p.Ready)
	body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": prompt, "max_tokens": 3})
	for i := 0; i < 3; i++ {
		if code, out, _ := post(t, "http://"+pl.Addr().String()+"/v1/completions", string(body)); code != 200 {
			t.Fatalf("%d %s", code, out)
		}
		waitfor.Cond(t, 5*time.Second, "prefill half done", func() bool {
			return p.prefill[0].inflight.Load() == 0 && p.prefill[1].inflight.Load() == 0
		})
	}
	waitfor.Cond(t, 5*time.Second, "prefill halves", func() bool { return len(b.got())+len(a.got()) == 3 })
	if len(b.got()) != 3 {
		t.Fatalf("prefill halves: a %d, b %d; want all on b", len(a.got()), len(b.got()))
	}
	if m := metrics(t, "http://"+pl.Addr().String()); !strings.Contains(m, `mooncake_proxy_indexer_queries_total{result="ok"} 3`) {
		t.Fatalf("indexer metrics:\n%s", m)
	}
	// The indexer gone: requests still route (without it), counted.
	cancel()
	if code, out, _ := post(t, "http://"+pl.Addr().String()+"/v1/completions", string(body)); code != 200 {
		t.Fatalf("without the indexer: %d %s", code, out)
	}
	if m := metrics(t, "http://"+pl.Addr().String()); !strings.Contains(m, `mooncake_proxy_indexer_queries_total{result="error"} 1`) {
		t.Fatalf("indexer error not counted:\n%s", m)
	}
}

// With a real tokenizer file (Llama 3's tokenizer.json, Llama 2's
// SentencePiece tokenizer.model), the proxy names the blocks the engines
// announce with their own token ids, through a remote conductor: a
// repeated prefix goes to the instance holding it. (Skipped without the
// files: scripts/fetch-tokenizers.sh.)
func TestProxyRealTokenizerRoutesRepeatedPrefix(t *testing.T) {
	for name, path := range map[string]string{
		"llama3": "../tokenizer/testdata/hf/llama3/tokenizer.json",
		"llama2": "../tokenizer/testdata/sp/llama2/tokenizer.model",
	} {
		t.Run(name, func(t *testing.T) { routeWithRealTokenizer(t, path) })
	}
}

func routeWithRealTokenizer(t *testing.T, path string) {
	bpe, err := tokenizer.LoadFile(path)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("%v (run scripts/fetch-tokenizers.sh)", err)
	}
	svc := service.New(service.Config{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); svc.Run(ctx, ln) }()
	defer func() { cancel(); wg.Wait() }()
	indexURL := "http://" + ln.Addr().String()

	a, b, c, d := newFake(t, true), newFake(t, true), newFake(t, true), newFake(t, false, "x")
	pubs := map[string]*kvevents.Publisher{}
	for _, id := range []string{"a", "b", "c"} {
		pub, err := kvevents.NewPublisher(kvevents.Config{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", BlockSize: 16, MapEncoding: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); pub.Run(ctx) }()
		<-pub.Ready()
		ep, rep := pub.Endpoints()
		pubs[id] = pub
		body, _ := json.Marshal(map[string]any{"endpoint": ep, "replay_endpoint": rep, "type": "vLLM", "modelname": "llama3",
			"instance_id": id, "block_size": 16, "dp_rank": 0})
		resp, err := http.Post(indexURL+"/register", "application/json", strings.NewReader(string(body)))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("register %s: %v %v", id, err, resp)
		}
		resp.Body.Close()
	}
	// Engine c has served a long document (its blocks on the device, as
	// vLLM announces them: its own hashes, the token ids); engine a holds
	// the same blocks on the host only.
	doc := strings.Repeat("Mooncake's conductor routes requests to the instance that already holds their prefix; ", 8)
	toks := bpe.EncodePrompt(doc)
	n := len(toks) / 16
	stored := func(medium string) kvevents.BlockStored {
		var hs []kvevents.Hash
		for i := 0; i < n; i++ {
			hs = append(hs, kvevents.BytesHash([]byte(fmt.Sprintf("sha-%d", i))))
		}
		return kvevents.BlockStored{BlockHashes: hs, TokenIDs: toks[:16*n], BlockSize: 16, Medium: medium}
	}
	pubs["c"].Publish(stored("GPU"))
	pubs["a"].Publish(stored("CPU"))
	waitfor.Cond(t, 10*time.Second, "the conductor holds the blocks", func() bool {
		for _, p := range pubs {
			p.Publish()
		}
		st := svc.Index().Stats()
		return st[conductorKey("c")].Live == n && st[conductorKey("a")].Live == n
	})
	p, err := New(Config{Prefill: []string{a.spec() + ",id=a", b.spec() + ",id=b", c.spec() + ",id=c"}, Decode: []string{d.srv.URL},
		PrefillPolicy: PolicyKVAware, Tokenizer: path, Indexer: IndexerConfig{URL: indexURL}, HealthInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pl, _ := net.Listen("tcp", "127.0.0.1:0")
	pctx, pcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx, pl) }()
	defer func() { pcancel(); <-done }()
	waitfor.Cond(t, 10*time.Second, "proxy ready", p.Ready)
	// The document with a new question after it: the prefix is c's.
	body, _ := json.Marshal(map[string]any{"model": "llama3", "prompt": doc + "What does it route on?", "max_tokens": 3})
	for i := 0; i < 3; i++ {
		if code, out, _ := post(t, "http://"+pl.Addr().String()+"/v1/completions", string(body)); code != 200 {
			t.Fatalf("%d %s", code, out)
		}
		waitfor.Cond(t, 5*time.Second, "prefill half done", func() bool {
			return p.prefill[0].inflight.Load()+p.prefill[1].inflight.Load()+p.prefill[2].inflight.Load() == 0
		})
	}
	waitfor.Cond(t, 5*time.Second, "prefill halves", func() bool { return len(a.got())+len(b.got())+len(c.got()) == 3 })
	if len(c.got()) != 3 {
		t.Fatalf("prefill halves: a %d, b %d, c %d; want all on c (device)", len(a.got()), len(b.got()), len(c.got()))
	}
	// c gone from rotation: the host copy on a beats nothing on b.
	c.healthy.Store(false)
	p.CheckNow(context.Background())
	p.CheckNow(context.Background())
	if code, out, _ := post(t, "http://"+pl.Addr().String()+"/v1/completions", string(body)); code != 200 {
		t.Fatalf("%d %s", code, out)
	}
	waitfor.Cond(t, 5*time.Second, "prefill half", func() bool { return len(a.got())+len(b.got()) == 1 })
	if len(a.got()) != 1 {
		t.Fatalf("without c: a %d, b %d; want a (host copy)", len(a.got()), len(b.got()))
	}
}

func conductorKey(id string) conductor.StreamKey {
	return conductor.StreamKey{Instance: id, Tenant: conductor.DefaultTenant}
}

// The engine mode asks a prefill instance's POST /tokenize, with the
// request's prompt or messages; token ids given are used as they are.
func TestEngineTokenizer(t *testing.T) {
	var got []map[string]any
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		got = append(got, body)
		mu.Unlock()
		if r.URL.Path != "/tokenize" || body["model"] == "broken" {
			http.Error(w, `{"error": "no"}`, 400)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"count": 3, "tokens": []int{7, 8, 9}})
	}))
	defer srv.Close()
	tk, err := newPromptTokenizer(TokenizerEngine, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if ids, err := tk.tokens(ctx, "/v1/chat/completions", Body{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, srv.URL); err != nil || fmt.Sprint(ids) != "[7 8 9]" {
		t.Fatalf("chat: %v %v", ids, err)
	}
	if ids, err := tk.tokens(ctx, "/v1/completions", Body{"prompt": "abc"}, srv.URL); err != nil || fmt.Sprint(ids) != "[7 8 9]" {
		t.Fatalf("prompt: %v %v", ids, err)
	}
	if ids, err := tk.tokens(ctx, "/v1/completions", Body{"prompt": []any{json.Number("5"), json.Number("6")}}, srv.URL); err != nil || fmt.Sprint(ids) != "[5 6]" {
		t.Fatalf("ids: %v %v", ids, err)
	}
	if _, err := tk.tokens(ctx, "/v1/completions", Body{"model": "broken", "prompt": "x"}, srv.URL); err == nil {
		t.Fatal("a refused tokenize is not an error")
	}
	if _, err := tk.tokens(ctx, "/v1/completions", Body{"prompt": "x"}, ""); err == nil {
		t.Fatal("no engine is not an error")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[0]["messages"] == nil || got[0]["model"] != "m" || got[1]["prompt"] != "abc" {
		t.Fatalf("bodies sent: %v", got)
	}
	if _, err := newPromptTokenizer("/nonexistent/tokenizer.json", nil); err == nil {
		t.Fatal("a missing tokenizer file accepted")
	}
}

// FuzzIndexerAnswer: any answer parses or errors, and what parses is
// ordered (Device <= Host <= Disk).
func FuzzIndexerAnswer(f *testing.F) {
	f.Add([]byte(`{"default": {"a": {"longest_matched": 256, "GPU": 128, "DP": {"0": 128}, "CPU": 256, "DISK": 0}}}`))
	f.Add([]byte(`{"instances": {"a": {"gpu": 64}}}`))
	f.Add([]byte(`{"x": {"a": {"GPU": -5, "CPU": 1e30}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseIndexerAnswer(b, 16)
		if err != nil {
			return
		}
		for id, c := range m {
			if c.Device > c.Host || c.Host > c.Disk {
				t.Fatalf("%s: %+v from %s", id, c, b)
			}
		}
	})
}

func TestPrefillSpecID(t *testing.T) {
	sp, err := ParsePrefillSpec("http://10.0.0.1:8100,id=vllm-prefill-node1,bootstrap=10.0.0.1:9000")
	if err != nil || sp.ID != "vllm-prefill-node1" || sp.Bootstrap != "10.0.0.1:9000" {
		t.Fatalf("%+v %v", sp, err)
	}
	if _, err := ParsePrefillSpec("http://10.0.0.1:8100,id="); err == nil {
		t.Fatal("an empty id accepted")
	}
	if err := (Config{Prefill: []string{"http://a:1"}, Decode: []string{"http://b:2"}, Indexer: IndexerConfig{URL: "tcp://x"}}).Validate(); err == nil {
		t.Fatal("a non-HTTP indexer URL accepted")
	}
	if err := (Config{Prefill: []string{"http://a:1"}, Decode: []string{"http://b:2"}, Tiers: TierWeights{Host: 2}}).Validate(); err == nil {
		t.Fatal("a tier weight above 1 accepted")
	}
}
