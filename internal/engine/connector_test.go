package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestConnectorHookOrder(t *testing.T) {
	c := &mapConnector{store: newStore()}
	e := newEngine(t, func(cfg *Config) { cfg.Connector = c })
	runToEnd(t, e, submit(t, e, greedy("a", prompt(20, 1), 2)))
	got := strings.Join(c.calls, " ")
	want := "register match alloc meta bind start wait0 save0 wait1 save1 waitsave getfinished errors clear output " +
		"meta bind start wait0 save0 wait1 save1 waitsave getfinished errors clear output finished"
	if !strings.HasPrefix(got, want) {
		t.Fatalf("hook calls:\n got %s\nwant %s", got, want)
	}
	if n := strings.Count(got, "finished "); n != 1 && !strings.HasSuffix(got, "finished") {
		t.Fatalf("RequestFinished called %d times: %s", n, got)
	}
}

// TestConnectorSaveLoad: engine A saves prompt blocks through SaveKVLayer;
// engine B loads them (synchronously in the forward, or asynchronously via
// WAITING_FOR_REMOTE_KVS) and must generate exactly A's tokens, with the
// same KV bytes, computing only what was not loaded.
func TestConnectorSaveLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		async  bool
		plen   int
		loaded int // tokens B should get from the connector
	}{
		{"sync-partial-block", false, 70, 64},
		{"async-partial-block", true, 70, 64},
		{"async-whole-prompt", true, 64, 64}, // last token recomputed
		{"sync-whole-prompt", false, 48, 48},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore()
			p := prompt(tc.plen, 5)
			a := newEngine(t, func(c *Config) {
				c.Connector = &mapConnector{store: store, save: true}
				c.MaxNumBatchedTokens = 20 // saves happen chunk by chunk
			})
			ra := runToEnd(t, a, submit(t, a, greedy("a", p, 10)))
			bc := &mapConnector{store: store, load: true, async: tc.async}
			b := newEngine(t, func(c *Config) { c.Connector = bc })
			rb := runToEnd(t, b, submit(t, b, greedy("b", p, 10)))
			if !slices.Equal(ra[0].tokens, rb[0].tokens) {
				t.Fatalf("tokens differ: %v vs %v", ra[0].tokens, rb[0].tokens)
			}
			if rb[0].final.NumCachedTokens != min(tc.loaded, tc.plen-1) {
				t.Fatalf("cached tokens %d want %d", rb[0].final.NumCachedTokens, min(tc.loaded, tc.plen-1))
			}
			sb := b.Stats()
			if sb.ExternalTokens != uint64(tc.loaded) {
				t.Fatalf("external tokens %d want %d", sb.ExternalTokens, tc.loaded)
			}
			if want := uint64(tc.plen - min(tc.loaded, tc.plen-1)); sb.PromptTokens != want {
				t.Fatalf("B computed %d prompt tokens, want %d", sb.PromptTokens, want)
			}
			if sb.BlocksUsed != 0 || a.Stats().BlocksUsed != 0 {
				t.Fatal("blocks leaked")
			}
			// The loaded blocks now sit in B's prefix cache: a third request
			// hits them locally, and their bytes equal A's saved blocks.
			rc := runToEnd(t, b, submit(t, b, greedy("c", p, 10)))
			if !slices.Equal(rc[0].tokens, ra[0].tokens) {
				t.Fatal("tokens from the local prefix cache differ")
			}
			if s := b.Stats(); s.PrefixHitTokens == 0 {
				t.Fatalf("no local hit after load: %+v", s)
			}
		})
	}
}

func TestConnectorKVBytesIdentical(t *testing.T) {
	store := newStore()
	p := prompt(64, 8)
	a := newEngine(t, func(c *Config) { c.Connector = &mapConnector{store: store, save: true}; c.MaxNumBatchedTokens = 64 })
	runToEnd(t, a, submit(t, a, greedy("a", p, 1)))
	// Another engine computing the same prompt in chunks of 5 saves into a
	// second store: every block must be byte-identical.
	store2 := newStore()
	b := newEngine(t, func(c *Config) { c.Connector = &mapConnector{store: store2, save: true}; c.MaxNumBatchedTokens = 5 })
	runToEnd(t, b, submit(t, b, greedy("b", p, 1), greedy("other", prompt(30, 1), 3)))
	if len(store.blocks) != 4 {
		t.Fatalf("store has %d blocks, want 4", len(store.blocks))
	}
	for h, layers := range store.blocks {
		other, ok := store2.blocks[h]
		if !ok {
			t.Fatalf("block %s missing", h)
		}
		for l := range layers {
			if string(layers[l]) != string(other[l]) {
				t.Fatalf("block %s layer %d differs between chunkings", h, l)
			}
		}
	}
}

func TestConnectorLoadErrors(t *testing.T) {
	store := newStore()
	p := prompt(70, 6)
	a := newEngine(t, func(c *Config) { c.Connector = &mapConnector{store: store, save: true} })
	want := runToEnd(t, a, submit(t, a, greedy("a", p, 8)))[0].tokens
	for _, tc := range []struct {
		name   string
		async  bool
		policy string
	}{
		{"sync-recompute", false, PolicyRecompute},
		{"async-recompute", true, PolicyRecompute},
		{"sync-fail", false, PolicyFail},
		{"async-fail", true, PolicyFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bc := &mapConnector{store: store, load: true, async: tc.async, failLoads: map[int]bool{2: true}}
			b := newEngine(t, func(c *Config) { c.Connector = bc; c.KVLoadFailurePolicy = tc.policy })
			res := runToEnd(t, b, submit(t, b, greedy("b", p, 8)))[0]
			if tc.policy == PolicyFail {
				if res.final.FinishReason != FinishError || !errors.Is(res.final.Err, ErrKVLoad) {
					t.Fatalf("want a load error, got %+v", res.final)
				}
			} else if !slices.Equal(res.tokens, want) {
				t.Fatalf("tokens after recompute %v want %v", res.tokens, want)
			}
			if s := b.Stats(); s.BlocksUsed != 0 {
				t.Fatalf("%d blocks leaked", s.BlocksUsed)
			}
			if tc.policy == PolicyRecompute {
				// Blocks 2 and 3 (32 tokens of a 70-token prompt; 6 in the tail) recomputed.
				if s := b.Stats(); s.PromptTokens < 70-32 {
					t.Fatalf("computed only %d prompt tokens", s.PromptTokens)
				}
			}
		})
	}
}

func TestConnectorDelayFree(t *testing.T) {
	c := &mapConnector{store: newStore(), delayFree: 3}
	e := newEngine(t, func(cfg *Config) { cfg.Connector = c })
	ss := submit(t, e, greedy("a", prompt(40, 1), 1))
	// Step until the request finishes; its 3 blocks must stay in use.
	for i := 0; i == 0 || (i < 10 && e.Stats().Running+e.Stats().Waiting > 0); i++ {
		e.Step(t.Context())
	}
	if s := e.Stats(); s.BlocksUsed != 3 || s.DelayedFree != 1 {
		t.Fatalf("after finish: %+v", s)
	}
	res := runToEnd(t, e, ss)
	if s := e.Stats(); s.BlocksUsed != 0 || s.DelayedFree != 0 {
		t.Fatalf("after done sending: %+v", s)
	}
	if res[0].final.KVTransferParams["saved_blocks"] != 3 {
		t.Fatalf("kv_transfer_params %v", res[0].final.KVTransferParams)
	}
}

// TestRunPollsConnector: under Run, an idle engine keeps stepping while a
// connector holds delay-freed blocks, so they are released without new work.
func TestRunPollsConnector(t *testing.T) {
	store := newStore()
	c := &mapConnector{store: store, delayFree: 5, save: true}
	e := newEngine(t, func(cfg *Config) { cfg.Connector = c; cfg.PollInterval = time.Millisecond })
	defer runInBackground(e)()
	s, err := e.Submit(greedy("a", prompt(40, 1), 2))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if _, out, err := s.Collect(rctx); err != nil || out.KVTransferParams["saved_blocks"] != 3 {
		t.Fatalf("collect: %v %+v", err, out)
	}
	waitfor.Cond(t, 30*time.Second, "condition", func() bool { st := e.Stats(); return st.BlocksUsed == 0 && st.DelayedFree == 0 })
	// An async load also completes under Run.
	b := newEngine(t, func(cfg *Config) { cfg.Connector = &mapConnector{store: store, load: true, async: true} })
	defer runInBackground(b)()
	s2, err := b.Submit(greedy("b", prompt(40, 1), 2))
	if err != nil {
		t.Fatal(err)
	}
	if _, out, err := s2.Collect(rctx); err != nil || out.NumCachedTokens != 32 {
		t.Fatalf("async load under Run: %v %+v", err, out)
	}
}

// pendingConnector answers MatchPending a few times, or fails.
type pendingConnector struct {
	NoopConnector
	pending int
	err     error
	calls   int
}

func (c *pendingConnector) GetNumNewMatchedTokens(*ReqState, int) (int, bool, error) {
	c.calls++
	if c.err != nil {
		return 0, false, c.err
	}
	if c.calls <= c.pending {
		return MatchPending, false, nil
	}
	return 0, false, nil
}

func TestConnectorMatchPendingAndError(t *testing.T) {
	pc := &pendingConnector{pending: 3}
	e := newEngine(t, func(c *Config) { c.Connector = pc })
	ss := submit(t, e, greedy("a", prompt(20, 1), 3))
	for range 3 {
		if _, poll := e.Step(t.Context()); !poll {
			t.Fatal("a pending match should make the engine poll")
		}
		if s := e.Stats(); s.Waiting != 1 || s.BlocksUsed != 0 {
			t.Fatalf("pending request was admitted: %+v", s)
		}
	}
	if res := runToEnd(t, e, ss); res[0].final.FinishReason != FinishLength || pc.calls != 4 {
		t.Fatalf("after pending: %+v, %d calls", res[0].final, pc.calls)
	}
	fc := &pendingConnector{err: errors.New("boom")}
	e2 := newEngine(t, func(c *Config) { c.Connector = fc })
	res := runToEnd(t, e2, submit(t, e2, greedy("b", prompt(20, 1), 3)))
	if res[0].final.FinishReason != FinishError || !errors.Is(res[0].final.Err, ErrConnector) {
		t.Fatalf("connector error: %+v", res[0].final)
	}
	if e2.Stats().BlocksUsed != 0 {
		t.Fatal("blocks leaked")
	}
}
