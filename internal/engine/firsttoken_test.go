package engine

import (
	"math"
	"slices"
	"testing"
)

// seedConnector is a mapConnector that also hands over a first output
// token per request id (FirstTokenSource), as a P/D decode connector does
// with prefill's aux data, and records every request's logprobs.
type seedConnector struct {
	*mapConnector
	first    map[string]int
	logprob  float32
	asked    []string
	logprobs map[string][]float32
	seeded   map[string]bool
}

var _ FirstTokenSource = (*seedConnector)(nil)

func (c *seedConnector) FirstToken(req *ReqState) (int, float32, bool) {
	c.asked = append(c.asked, req.ID())
	tok, ok := c.first[req.ID()]
	return tok, c.logprob, ok
}

func (c *seedConnector) RequestFinished(req *ReqState, blockIDs []int) (bool, map[string]any) {
	if c.logprobs == nil {
		c.logprobs, c.seeded = map[string][]float32{}, map[string]bool{}
	}
	c.logprobs[req.ID()] = slices.Clone(req.OutputLogprobs())
	c.seeded[req.ID()] = req.FirstTokenFromConnector()
	return c.mapConnector.RequestFinished(req, blockIDs)
}

// colocated runs req on a fresh engine that saves its prompt blocks into
// store; it returns the tokens and their logprobs.
func colocated(t *testing.T, store *blockStore, req Request) ([]int, []float32) {
	t.Helper()
	sc := &seedConnector{mapConnector: &mapConnector{store: store, save: true}}
	a := newEngine(t, func(c *Config) { c.Connector = sc; c.MaxNumBatchedTokens = 20 })
	res := runToEnd(t, a, submit(t, a, req))[0]
	if lps := sc.logprobs[req.ID]; len(lps) != len(res.tokens) {
		t.Fatalf("%d logprobs for %d tokens", len(lps), len(res.tokens))
	}
	return res.tokens, sc.logprobs[req.ID]
}

// TestFirstTokenFromConnector: when the whole prompt's KV arrives with the
// first output token, the engine takes that token, computes no prompt
// token, and continues exactly as a colocated engine.
func TestFirstTokenFromConnector(t *testing.T) {
	seed := uint64(11)
	sampled := func(id string, p []int, n int) Request {
		return Request{ID: id, Prompt: p, Params: SamplingParams{MaxTokens: n, Temperature: 0.9, TopP: 0.95, Seed: &seed, IgnoreEOS: true}}
	}
	for _, tc := range []struct {
		name string
		req  func(id string, p []int, n int) Request
		plen int
	}{
		{"greedy-block-multiple", greedy, 64},
		{"greedy-short", greedy, 32},
		{"sampled", sampled, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore()
			p := prompt(tc.plen, 3)
			want, wantLP := colocated(t, store, tc.req("a", p, 10))
			bc := &seedConnector{mapConnector: &mapConnector{store: store, load: true, async: true},
				first: map[string]int{"b": want[0]}, logprob: wantLP[0]}
			b := newEngine(t, func(c *Config) { c.Connector = bc })
			res := runToEnd(t, b, submit(t, b, tc.req("b", p, 10)))[0]
			if !slices.Equal(res.tokens, want) {
				t.Fatalf("tokens %v want %v", res.tokens, want)
			}
			if !slices.Equal(bc.logprobs["b"], wantLP) {
				t.Fatalf("logprobs %v want %v", bc.logprobs["b"], wantLP)
			}
			s := b.Stats()
			if s.PromptTokens != 0 || s.FirstTokensFromConnector != 1 || s.GeneratedTokens != 10 {
				t.Fatalf("prompt tokens %d (want 0), first tokens from connector %d, generated %d", s.PromptTokens, s.FirstTokensFromConnector, s.GeneratedTokens)
			}
			if !bc.seeded["b"] || res.final.NumCachedTokens != tc.plen || res.final.NumOutputTokens != 10 {
				t.Fatalf("seeded %v, final %+v", bc.seeded["b"], res.final)
			}
			if s.BlocksUsed != 0 {
				t.Fatalf("%d blocks leaked", s.BlocksUsed)
			}
		})
	}
}

// TestFirstTokenPositions seeds a token the model would not pick: the
// output continues from it, as a colocated run of prompt+token does, so the
// token sits at position len(prompt) and its KV is computed by decode.
func TestFirstTokenPositions(t *testing.T) {
	store := newStore()
	p := prompt(48, 4)
	want, _ := colocated(t, store, greedy("a", p, 6))
	other := (want[0] + 1) % 256
	cont, _ := colocated(t, newStore(), greedy("c", append(slices.Clone(p), other), 5))
	bc := &seedConnector{mapConnector: &mapConnector{store: store, load: true, async: true},
		first: map[string]int{"b": other}, logprob: -3.5}
	b := newEngine(t, func(c *Config) { c.Connector = bc })
	res := runToEnd(t, b, submit(t, b, greedy("b", p, 6)))[0]
	if wantTok := append([]int{other}, cont...); !slices.Equal(res.tokens, wantTok) {
		t.Fatalf("tokens %v want %v", res.tokens, wantTok)
	}
	if lps := bc.logprobs["b"]; lps[0] != -3.5 {
		t.Fatalf("first logprob %v, want the connector's", lps[0])
	}
}

// TestFirstTokenFallback: a partial load, a failed load or no token means
// the last prompt position is recomputed; a seeded token that ends the
// request (max_tokens 1) finishes it at once.
func TestFirstTokenFallback(t *testing.T) {
	store := newStore()
	p70, p64 := prompt(70, 6), prompt(64, 6)
	want70, _ := colocated(t, store, greedy("a", p70, 4))
	want64, _ := colocated(t, store, greedy("a64", p64, 4))
	t.Run("partial-prefix", func(t *testing.T) {
		bc := &seedConnector{mapConnector: &mapConnector{store: store, load: true, async: true}, first: map[string]int{"b": 7}}
		b := newEngine(t, func(c *Config) { c.Connector = bc })
		res := runToEnd(t, b, submit(t, b, greedy("b", p70, 4)))[0]
		if !slices.Equal(res.tokens, want70) || len(bc.asked) != 0 || bc.seeded["b"] {
			t.Fatalf("tokens %v want %v (asked %v)", res.tokens, want70, bc.asked)
		}
		if s := b.Stats(); s.PromptTokens != 70-64 || s.FirstTokensFromConnector != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("failed-load", func(t *testing.T) {
		bc := &seedConnector{mapConnector: &mapConnector{store: store, load: true, async: true, failLoads: map[int]bool{1: true}}, first: map[string]int{"b": 7}}
		b := newEngine(t, func(c *Config) { c.Connector = bc })
		res := runToEnd(t, b, submit(t, b, greedy("b", p64, 4)))[0]
		if !slices.Equal(res.tokens, want64) || bc.seeded["b"] {
			t.Fatalf("tokens %v want %v", res.tokens, want64)
		}
		if s := b.Stats(); s.PromptTokens != 64-16 {
			t.Fatalf("computed %d prompt tokens, want 48", s.PromptTokens)
		}
	})
	t.Run("no-token", func(t *testing.T) {
		bc := &seedConnector{mapConnector: &mapConnector{store: store, load: true, async: true}}
		b := newEngine(t, func(c *Config) { c.Connector = bc })
		res := runToEnd(t, b, submit(t, b, greedy("b", p64, 4)))[0]
		if !slices.Equal(res.tokens, want64) || len(bc.asked) != 1 {
			t.Fatalf("tokens %v want %v (asked %v)", res.tokens, want64, bc.asked)
		}
		if s := b.Stats(); s.PromptTokens != 1 {
			t.Fatalf("computed %d prompt tokens, want 1", s.PromptTokens)
		}
	})
	t.Run("seed-finishes", func(t *testing.T) {
		bc := &seedConnector{mapConnector: &mapConnector{store: store, load: true, async: true}, first: map[string]int{"b": want64[0]}}
		b := newEngine(t, func(c *Config) { c.Connector = bc })
		res := runToEnd(t, b, submit(t, b, greedy("b", p64, 1)))[0]
		if !slices.Equal(res.tokens, want64[:1]) || res.final.FinishReason != FinishLength {
			t.Fatalf("tokens %v final %+v", res.tokens, res.final)
		}
		if s := b.Stats(); s.PromptTokens != 0 || s.BlocksUsed != 0 || s.Steps == 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

func TestLogprob(t *testing.T) {
	logits := []float32{1, 2, 3, 0.5}
	var sum float64
	for i := range logits {
		lp := float64(logprob(logits, i))
		if lp > 0 {
			t.Fatalf("logprob %v > 0", lp)
		}
		sum += math.Exp(lp)
	}
	if math.Abs(sum-1) > 1e-6 {
		t.Fatalf("probabilities sum to %v", sum)
	}
	if got, want := logprob(logits, 2), float32(3-math.Log(math.Exp(1)+math.Exp(2)+math.Exp(3)+math.Exp(0.5))); math.Abs(float64(got-want)) > 1e-6 {
		t.Fatalf("logprob %v want %v", got, want)
	}
}
