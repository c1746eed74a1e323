package engine

import (
	"slices"
	"testing"
)

// TestLoadErrorRecomputesOnlyFromFailedBlock is vLLM's partial load failure
// (get_block_ids_with_load_errors) under the recompute policy: the blocks
// loaded before the failed one are used as loaded, the failed block and
// what follows it are recomputed, and the output equals a run without a
// connector, token for token.
func TestLoadErrorRecomputesOnlyFromFailedBlock(t *testing.T) {
	store := newStore()
	p := prompt(70, 6) // 4 full blocks of 16 tokens and 6 in the tail
	a := newEngine(t, func(c *Config) { c.Connector = &mapConnector{store: store, save: true} })
	want := runToEnd(t, a, submit(t, a, greedy("a", p, 8)))[0].tokens
	for _, failed := range []int{1, 3} {
		bc := &mapConnector{store: store, load: true, failLoads: map[int]bool{failed: true}}
		b := newEngine(t, func(c *Config) { c.Connector = bc; c.KVLoadFailurePolicy = PolicyRecompute })
		res := runToEnd(t, b, submit(t, b, greedy("b", p, 8)))[0]
		if !slices.Equal(res.tokens, want) {
			t.Fatalf("block %d failed: tokens %v, want %v", failed, res.tokens, want)
		}
		bs := b.Config().BlockSize
		if got, wantComputed := b.Stats().PromptTokens, uint64(len(p)-failed*bs); got != wantComputed {
			t.Fatalf("block %d failed: %d prompt tokens computed, want %d (only from the failed block on)", failed, got, wantComputed)
		}
		if s := b.Stats(); s.BlocksUsed != 0 {
			t.Fatalf("%d blocks leaked", s.BlocksUsed)
		}
	}
}

// TestLoadErrorsWithForeignBlockIDs: a connector that reports block ids
// this engine does not have (negative, past the pool) is ignored for those
// ids: no crash, the request finishes with the right tokens.
func TestLoadErrorsWithForeignBlockIDs(t *testing.T) {
	store := newStore()
	p := prompt(70, 7)
	a := newEngine(t, func(c *Config) { c.Connector = &mapConnector{store: store, save: true} })
	want := runToEnd(t, a, submit(t, a, greedy("a", p, 8)))[0].tokens
	bc := &mapConnector{store: store, load: true}
	b := newEngine(t, func(c *Config) { c.Connector = bc })
	bc.invalid = []int{-1, 1 << 30, b.pool.NumBlocks()}
	res := runToEnd(t, b, submit(t, b, greedy("b", p, 8)))[0]
	if !slices.Equal(res.tokens, want) {
		t.Fatalf("tokens %v, want %v", res.tokens, want)
	}
	if s := b.Stats(); s.BlocksUsed != 0 {
		t.Fatalf("%d blocks leaked", s.BlocksUsed)
	}
}
