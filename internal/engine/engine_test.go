package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/model"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func workload() []Request {
	var reqs []Request
	for i, n := range []int{5, 16, 33, 47, 64, 90} {
		reqs = append(reqs, greedy(fmt.Sprintf("r%d", i), prompt(n, i), 12+i))
	}
	return reqs
}

func reference(t *testing.T) [][]int {
	t.Helper()
	var want [][]int
	for _, r := range workload() {
		e := newEngine(t, func(c *Config) { c.DisablePrefixCaching = true })
		res := runToEnd(t, e, submit(t, e, r))
		if res[0].final.FinishReason != FinishLength || len(res[0].tokens) != r.Params.MaxTokens {
			t.Fatalf("%s: %+v", r.ID, res[0].final)
		}
		want = append(want, res[0].tokens)
	}
	return want
}

// TestBatchAndChunkInvariance: greedy tokens of every request are the same
// alone, batched together under several token budgets (chunked prefill),
// under preemption pressure, and across repeated runs.
func TestBatchAndChunkInvariance(t *testing.T) {
	want := reference(t)
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"batched-budget512", nil},
		{"chunk7", func(c *Config) { c.MaxNumBatchedTokens = 7 }},
		{"chunk16", func(c *Config) { c.MaxNumBatchedTokens = 16 }},
		{"chunk33-blocksize8", func(c *Config) { c.MaxNumBatchedTokens = 33; c.BlockSize = 8 }},
		{"two-seqs", func(c *Config) { c.MaxNumSeqs = 2 }},
		{"preempt", func(c *Config) { c.NumBlocks = 9; c.MaxNumBatchedTokens = 64 }},
		{"no-prefix-cache", func(c *Config) { c.DisablePrefixCaching = true; c.MaxNumBatchedTokens = 40 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, tc.mod)
			res := runToEnd(t, e, submit(t, e, workload()...))
			for i := range res {
				if !slices.Equal(res[i].tokens, want[i]) {
					t.Fatalf("request %d: got %v want %v (%+v)", i, res[i].tokens, want[i], res[i].final)
				}
			}
			s := e.Stats()
			if s.BlocksUsed != 0 {
				t.Fatalf("%d blocks leaked", s.BlocksUsed)
			}
			if tc.name == "preempt" && s.Preemptions == 0 {
				t.Fatal("expected preemptions")
			}
		})
	}
}

func TestPrefixCacheHit(t *testing.T) {
	e := newEngine(t, nil)
	p := prompt(70, 3)
	first := runToEnd(t, e, submit(t, e, greedy("a", p, 5)))
	second := runToEnd(t, e, submit(t, e, greedy("b", p, 5)))
	if !slices.Equal(first[0].tokens, second[0].tokens) {
		t.Fatalf("tokens differ: %v vs %v", first[0].tokens, second[0].tokens)
	}
	if first[0].final.NumCachedTokens != 0 || second[0].final.NumCachedTokens != 64 {
		t.Fatalf("cached tokens %d, %d; want 0, 64", first[0].final.NumCachedTokens, second[0].final.NumCachedTokens)
	}
	// A different salt must not hit.
	r := greedy("c", p, 5)
	r.CacheSalt = "tenant-2"
	third := runToEnd(t, e, submit(t, e, r))
	if third[0].final.NumCachedTokens != 0 {
		t.Fatalf("salted request hit the cache: %d", third[0].final.NumCachedTokens)
	}
	if s := e.Stats(); s.PrefixHitTokens != 64 || s.PrefixQueriedTokens != 210 || s.BlocksUsed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestSamplingSeeded(t *testing.T) {
	seed := uint64(42)
	mk := func(id string) Request {
		return Request{ID: id, Prompt: prompt(20, 9), Params: SamplingParams{MaxTokens: 16, Temperature: 1.0, Seed: &seed, IgnoreEOS: true}}
	}
	e := newEngine(t, nil)
	a := runToEnd(t, e, submit(t, e, mk("a")))
	e2 := newEngine(t, func(c *Config) { c.MaxNumBatchedTokens = 5 })
	b := runToEnd(t, e2, submit(t, e2, greedy("x", prompt(30, 1), 20), mk("b")))
	if !slices.Equal(a[0].tokens, b[1].tokens) {
		t.Fatalf("seeded sampling differs: %v vs %v", a[0].tokens, b[1].tokens)
	}
	// Under preemption pressure (3 requests of 3 blocks each, 4 blocks).
	e3 := newEngine(t, func(c *Config) { c.NumBlocks = 4; c.MaxNumBatchedTokens = 8 })
	c := runToEnd(t, e3, submit(t, e3, greedy("y", prompt(30, 2), 16), mk("c"), greedy("z", prompt(25, 3), 16)))
	if !slices.Equal(a[0].tokens, c[1].tokens) || e3.Stats().Preemptions == 0 {
		t.Fatalf("seeded sampling under preemption differs (%d preemptions): %v vs %v", e3.Stats().Preemptions, a[0].tokens, c[1].tokens)
	}
	g := runToEnd(t, e, submit(t, e, greedy("g", prompt(20, 9), 16)))
	if slices.Equal(a[0].tokens, g[0].tokens) {
		t.Fatal("temperature 1 gave exactly the greedy tokens; sampling is not happening")
	}
}

func TestStopConditions(t *testing.T) {
	e := newEngine(t, nil)
	ref := runToEnd(t, e, submit(t, e, greedy("ref", prompt(10, 2), 10)))[0].tokens
	// Stop on a token id that greedy produces at position 3.
	r := greedy("stop-id", prompt(10, 2), 10)
	r.Params.StopTokenIDs = []int{ref[3]}
	got := runToEnd(t, e, submit(t, e, r))[0]
	idx := slices.Index(ref, ref[3])
	if got.final.FinishReason != FinishStop || len(got.tokens) != idx+1 {
		t.Fatalf("stop id: %+v tokens %v ref %v", got.final, got.tokens, ref)
	}
	r = greedy("stop-seq", prompt(10, 2), 10)
	r.Params.StopSequences = [][]int{ref[4:6]}
	got = runToEnd(t, e, submit(t, e, r))[0]
	if got.final.FinishReason != FinishStop || !slices.Equal(got.tokens[len(got.tokens)-2:], ref[4:6]) {
		t.Fatalf("stop seq: %+v tokens %v ref %v", got.final, got.tokens, ref)
	}
}

func TestAbort(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxNumBatchedTokens = 16 })
	ss := submit(t, e, greedy("keep", prompt(40, 1), 8), greedy("gone", prompt(200, 2), 50))
	ctx := context.Background()
	e.Step(ctx)
	e.Step(ctx)
	e.Abort("gone")
	e.Abort("unknown-id")
	res := runToEnd(t, e, ss)
	if res[1].final.FinishReason != FinishAbort || res[0].final.FinishReason != FinishLength {
		t.Fatalf("finish reasons %q %q", res[0].final.FinishReason, res[1].final.FinishReason)
	}
	if s := e.Stats(); s.BlocksUsed != 0 {
		t.Fatalf("%d blocks leaked after abort", s.BlocksUsed)
	}
}

func TestSubmitErrors(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.MaxModelLen = 100; c.MaxWaiting = 2 })
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"empty prompt", Request{ID: "a", Params: SamplingParams{MaxTokens: 1}}, ErrInvalidRequest},
		{"no id", Request{Prompt: []int{1}, Params: SamplingParams{MaxTokens: 1}}, ErrInvalidRequest},
		{"max tokens 0", Request{ID: "a", Prompt: []int{1}}, ErrInvalidRequest},
		{"too long", greedy("a", prompt(100, 1), 1), ErrInvalidRequest},
		{"prompt+max too long", greedy("a", prompt(90, 1), 11), ErrInvalidRequest},
		{"bad token", greedy("a", []int{1, 9999}, 1), ErrInvalidRequest},
		{"negative temperature", Request{ID: "a", Prompt: []int{1}, Params: SamplingParams{MaxTokens: 1, Temperature: -1}}, ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.Submit(tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	submit(t, e, greedy("q1", []int{1}, 1), greedy("q2", []int{1}, 1))
	if _, err := e.Submit(greedy("q1", []int{1}, 1)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("duplicate id: %v", err)
	}
	if _, err := e.Submit(greedy("q3", []int{1}, 1)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("queue full: %v", err)
	}
}

func TestRunServesAndShutsDown(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.Connector = holdConnector{} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	s, err := e.Submit(greedy("a", prompt(30, 1), 6))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	toks, final, err := s.Collect(rctx)
	if err != nil || len(toks) != 6 || final.FinishReason != FinishLength {
		t.Fatalf("collect: %v %v %+v", err, toks, final)
	}
	// A reader that goes away aborts its request and frees its blocks
	// (the request is parked in WAITING_FOR_REMOTE_KVS holding 3 blocks).
	s2, err := e.Submit(held("b", "remote"))
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 30*time.Second, "condition", func() bool { s := e.Stats(); return s.WaitingForRemote == 1 && s.BlocksUsed == 3 })
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, _, err := s2.Next(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("next after cancel: %v", err)
	}
	waitfor.Cond(t, 30*time.Second, "condition", func() bool { s := e.Stats(); return s.WaitingForRemote == 0 && s.BlocksUsed == 0 })
	// Requests still waiting at shutdown get an abort.
	s3, err := e.Submit(held("c", "pending"))
	if err != nil {
		t.Fatal(err)
	}
	s4, err := e.Submit(held("d", "remote"))
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 30*time.Second, "condition", func() bool { s := e.Stats(); return s.Waiting == 1 && s.WaitingForRemote == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Stream{s3, s4} {
		if _, final, err := st.Collect(rctx); err != nil || final.FinishReason != FinishAbort {
			t.Fatalf("after shutdown: %v %+v", err, final)
		}
	}
	if s := e.Stats(); s.BlocksUsed != 0 {
		t.Fatalf("%d blocks leaked at shutdown", s.BlocksUsed)
	}
	if _, err := e.Submit(greedy("e", []int{1}, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after close: %v", err)
	}
}

func TestTopP(t *testing.T) {
	seed := uint64(7)
	mk := func(id string, topP float64) Request {
		return Request{ID: id, Prompt: prompt(20, 4), Params: SamplingParams{MaxTokens: 12, Temperature: 2, TopP: topP, Seed: &seed, IgnoreEOS: true}}
	}
	e := newEngine(t, nil)
	g := runToEnd(t, e, submit(t, e, greedy("g", prompt(20, 4), 12)))[0].tokens
	// A tiny top_p keeps only the most likely token: greedy, whatever the temperature.
	if got := runToEnd(t, e, submit(t, e, mk("p0", 1e-9)))[0].tokens; !slices.Equal(got, g) {
		t.Fatalf("top_p≈0 gave %v, greedy %v", got, g)
	}
	a := runToEnd(t, e, submit(t, e, mk("a", 0.5)))[0].tokens
	b := runToEnd(t, e, submit(t, e, mk("b", 0.5)))[0].tokens
	if !slices.Equal(a, b) {
		t.Fatal("seeded top_p sampling not reproducible")
	}
	if _, err := e.Submit(mk("bad", 1.5)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("top_p 1.5: %v", err)
	}
}

// TestTensorParallel: an engine split across 2 or 4 ranks (model tiny-tp,
// 4 KV heads) generates the tokens of the one-rank engine, batched and
// chunked (the model's tests compare logits bit for bit), and an engine with a store
// connector saving blocks from one TP and loading them into another gets
// the same output; a TP that does not divide the KV heads is refused.
func TestTensorParallel(t *testing.T) {
	m, err := model.NewBuiltin("tiny-tp", 1)
	if err != nil {
		t.Fatal(err)
	}
	run := func(tp int, conn Connector) [][]int {
		e := newEngine(t, func(c *Config) {
			c.Model, c.TP, c.MaxNumBatchedTokens = m, tp, 24
			if conn != nil {
				c.Connector = conn
			}
		})
		if got := len(e.KVCaches().Ranks); got != tp {
			t.Fatalf("tp %d: %d ranks of KV regions", tp, got)
		}
		res := runToEnd(t, e, submit(t, e, workload()...))
		var toks [][]int
		for _, r := range res {
			toks = append(toks, r.tokens)
		}
		if s := e.Stats(); s.BlocksUsed != 0 {
			t.Fatalf("tp %d: %d blocks leaked", tp, s.BlocksUsed)
		}
		return toks
	}
	wantToks := run(1, nil)
	for _, tp := range []int{2, 4} {
		toks := run(tp, nil)
		for i := range toks {
			if !slices.Equal(toks[i], wantToks[i]) {
				t.Fatalf("tp %d request %d: %v, tp 1 %v", tp, i, toks[i], wantToks[i])
			}
		}
	}
	// Blocks saved by a TP 4 engine load into a TP 2 one (TP-independent form).
	store := newStore()
	run(4, &mapConnector{store: store, save: true})
	if len(store.blocks) == 0 {
		t.Fatal("nothing saved")
	}
	toks := run(2, &mapConnector{store: store, load: true})
	for i := range toks {
		if !slices.Equal(toks[i], wantToks[i]) {
			t.Fatalf("tp 4 -> 2 through the store, request %d: %v, want %v", i, toks[i], wantToks[i])
		}
	}
	if _, err := New(Config{Model: m, TP: 3}); !errors.Is(err, model.ErrTP) {
		t.Fatalf("tp 3 of 4 KV heads: %v", err)
	}
}
