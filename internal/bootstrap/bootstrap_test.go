package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRegistry(t *testing.T) {
	r := NewRegistry("e1", "h", 2)
	tests := []struct {
		name string
		req  RegisterRequest
		want error
	}{
		{"ok", RegisterRequest{EngineID: "e1", Worker: Worker{TPRank: 1, Addr: "a:1"}}, nil},
		{"idempotent", RegisterRequest{EngineID: "e1", Worker: Worker{TPRank: 1, Addr: "a:1"}}, nil},
		{"rank 0", RegisterRequest{EngineID: "e1", Worker: Worker{Addr: "a:0"}}, nil},
		{"other address", RegisterRequest{EngineID: "e1", Worker: Worker{TPRank: 1, Addr: "b:1"}}, ErrConflict},
		{"other engine", RegisterRequest{EngineID: "e2", Worker: Worker{Addr: "a:0"}}, ErrConflict},
		{"tp out of range", RegisterRequest{EngineID: "e1", Worker: Worker{TPRank: 2, Addr: "a:2"}}, ErrBadRequest},
		{"no addr", RegisterRequest{EngineID: "e1"}, ErrBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := r.Register(tc.req)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Register = %v, want %v", err, tc.want)
			}
		})
	}
	r.SetTP(2, "head-major-v1")
	q := r.Query()
	if q.EngineID != "e1" || q.CompatHash != "h" || q.TPSize != 2 || q.KVLayout != "head-major-v1" || q.ProtocolVersion != ProtocolVersion ||
		len(q.Workers) != 2 || q.Workers[0].Addr != "a:0" || q.Workers[1].Addr != "a:1" {
		t.Fatalf("query %+v", q)
	}
}

type fakeHandler struct {
	mu       sync.Mutex
	pulls    []PullRequest
	released []string
}

func (f *fakeHandler) Pull(ctx context.Context, req PullRequest) PullResponse {
	f.mu.Lock()
	f.pulls = append(f.pulls, req)
	f.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		return PullResponse{Status: StatusFailed, Code: CodeBadRequest, Error: "no deadline"}
	}
	return PullResponse{Status: StatusDone, Blocks: len(req.BlockIDs), Bytes: 64}
}

func (f *fakeHandler) Release(tid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, tid)
	return tid == "known"
}

func goodPull() PullRequest {
	return PullRequest{TransferID: "x", ProtocolVersion: ProtocolVersion, CompatHash: "h", TPSize: 1,
		Segment: "127.0.0.1:1", LayerAddrs: []uint64{4096}, BlockBytes: 64, NumTokens: 20, BlockIDs: []int{1, 2}, TimeoutMS: 1000}
}

func TestServerAndClient(t *testing.T) {
	h := &fakeHandler{}
	reg := NewRegistry("e1", "h", 1)
	srv := httptest.NewServer(&Server{Registry: reg, Handler: h})
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := &Client{}
	ctx := context.Background()
	if _, err := c.Query(ctx, addr); err == nil {
		t.Fatal("query succeeded with no worker registered")
	}
	if err := c.Register(ctx, addr, RegisterRequest{EngineID: "e1", Worker: Worker{Addr: "w:1"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Register(ctx, addr, RegisterRequest{EngineID: "zz", Worker: Worker{Addr: "w:1"}}); err == nil || !strings.Contains(err.Error(), "conflicting") {
		t.Fatalf("conflicting register: %v", err)
	}
	q, err := c.Query(ctx, addr)
	if err != nil || q.EngineID != "e1" || len(q.Workers) != 1 {
		t.Fatalf("query %+v %v", q, err)
	}
	resp, err := c.Pull(ctx, addr, goodPull())
	if err != nil || resp.Status != StatusDone || resp.Blocks != 2 {
		t.Fatalf("pull %+v %v", resp, err)
	}
	bad := goodPull()
	bad.TPRank = 3
	resp, err = c.Pull(ctx, addr, bad)
	if err != nil || resp.Status != StatusFailed || resp.Code != CodeBadRequest {
		t.Fatalf("bad pull %+v %v", resp, err)
	}
	if err := c.Release(ctx, addr, "known"); err != nil {
		t.Fatal(err)
	}
	if len(h.released) != 1 || len(h.pulls) != 1 {
		t.Fatalf("handler saw %d pulls %d releases", len(h.pulls), len(h.released))
	}
	for _, path := range []string{"/health", "/nope"} {
		r, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if (path == "/health") != (r.StatusCode == 200) {
			t.Fatalf("%s: %d", path, r.StatusCode)
		}
	}
	r, err := http.Post(srv.URL+"/pull", "application/json", strings.NewReader(`{"transfer_id":"x","evil":1}`))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 400 {
		t.Fatalf("unknown field: %d", r.StatusCode)
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Server{Registry: NewRegistry("e", "h", 1)}).Serve(ctx, ln) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}

func TestPullValidate(t *testing.T) {
	mod := func(f func(*PullRequest)) PullRequest { p := goodPull(); f(&p); return p }
	tests := []struct {
		name string
		p    PullRequest
		ok   bool
	}{
		{"good", goodPull(), true},
		{"full hit", mod(func(p *PullRequest) { p.BlockIDs = nil; p.Segment = ""; p.LayerAddrs = nil }), true},
		{"no id", mod(func(p *PullRequest) { p.TransferID = "" }), false},
		{"tp", mod(func(p *PullRequest) { p.TPSize = 0 }), false},
		{"all ranks", mod(func(p *PullRequest) { p.TPSize, p.TPRanks, p.LayerAddrs = 2, 2, []uint64{1, 2} }), true},
		{"ranks beyond size", mod(func(p *PullRequest) { p.TPSize, p.TPRank, p.TPRanks = 2, 1, 2 }), false},
		{"addrs per rank", mod(func(p *PullRequest) { p.TPSize, p.TPRanks, p.LayerAddrs = 2, 2, []uint64{1, 2, 3} }), false},
		{"tokens", mod(func(p *PullRequest) { p.NumTokens = 0 }), false},
		{"no segment", mod(func(p *PullRequest) { p.Segment = "" }), false},
		{"negative block", mod(func(p *PullRequest) { p.BlockIDs = []int{-1} }), false},
		{"no timeout", mod(func(p *PullRequest) { p.TimeoutMS = 0 }), false},
	}
	for _, tc := range tests {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func FuzzDecodePull(f *testing.F) {
	f.Add([]byte(`{"transfer_id":"x","protocol_version":1,"compat_hash":"h","tp_size":1,"tp_rank":0,"segment":"a:1","layer_addrs":[1],"block_bytes":8,"num_tokens":3,"first_block":0,"block_ids":[0],"timeout_ms":5}`))
	f.Add([]byte(`{"transfer_id":""}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"block_ids":[-1,99999999999999999999]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePull(b)
		if err != nil {
			return
		}
		if p.TransferID == "" || p.TPSize <= 0 || p.TimeoutMS <= 0 || p.NumTokens <= 0 {
			t.Fatalf("invalid request accepted: %+v", p)
		}
		for _, id := range p.BlockIDs {
			if id < 0 {
				t.Fatalf("negative block accepted")
			}
		}
	})
}

func TestSGLangRoute(t *testing.T) {
	s := &Server{Registry: NewRegistry("e", "h", 1)}
	srv := httptest.NewServer(s)
	defer srv.Close()
	get := func(q string) (int, string) {
		resp, err := http.Get(srv.URL + "/route?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("prefill_dp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"); code != 503 {
		t.Fatalf("before registration: %d", code)
	}
	put := func(body string) int {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/route", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(`{"attn_tp_size":1,"attn_tp_rank":0,"attn_dp_size":1,"attn_dp_rank":0,"pp_size":1,"pp_rank":0,"rank_ip":"10.0.0.1","rank_port":8998,"page_size":16,"kv_cache_dtype":"float32","system_dp_rank":0}`); code != 200 {
		t.Fatalf("PUT %d", code)
	}
	if code := put(`{"rank_ip":"10.0.0.1","rank_port":1,"attn_tp_rank":3}`); code != 400 {
		t.Fatalf("rank outside size: %d", code)
	}
	if code, b := get("prefill_dp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"); code != 200 || b != `{"attn_tp_size":1,"attn_dp_size":1,"pp_size":1,"page_size":16,"kv_cache_dtype":"float32"}` {
		t.Fatalf("server info %d %s", code, b)
	}
	if code, b := get("prefill_dp_rank=0&target_tp_rank=0&target_pp_rank=0"); code != 200 || !strings.Contains(b, `"rank_ip":"10.0.0.1","rank_port":8998`) {
		t.Fatalf("rank %d %s", code, b)
	}
	if code, _ := get("engine_rank=0&target_dp_group=0"); code != 200 {
		t.Fatalf("older query names: %d", code)
	}
	if code, _ := get("prefill_dp_rank=0&target_tp_rank=1&target_pp_rank=0"); code != 404 {
		t.Fatalf("unknown rank: %d", code)
	}
	if code, _ := get("target_tp_rank=0"); code != 400 {
		t.Fatalf("missing rank: %d", code)
	}
	var c Client
	var ri RouteInfo
	if err := c.Route(context.Background(), strings.TrimPrefix(srv.URL, "http://"), 0, 0, 0, &ri); err != nil || ri.RankPort != 8998 {
		t.Fatalf("client: %+v %v", ri, err)
	}
}

// The aux data's wire shape: the first token and its logprob, omitted when
// prefill has none.
func TestPullResponseAux(t *testing.T) {
	b, _ := json.Marshal(PullResponse{Status: StatusDone, Aux: &Aux{FirstToken: 7, FirstLogprob: -0.125}})
	if !strings.Contains(string(b), `"aux":{"first_token":7,"first_logprob":-0.125}`) {
		t.Fatalf("encoded %s", b)
	}
	var r PullResponse
	if err := json.Unmarshal(b, &r); err != nil || r.Aux == nil || *r.Aux != (Aux{FirstToken: 7, FirstLogprob: -0.125}) {
		t.Fatalf("decoded %+v %v", r, err)
	}
	if b, _ := json.Marshal(PullResponse{Status: StatusDone}); strings.Contains(string(b), "aux") {
		t.Fatalf("aux without data: %s", b)
	}
}
