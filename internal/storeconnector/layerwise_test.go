package storeconnector

import (
	"slices"
	"testing"
	"time"
)

func layerwise(cc *Config) { cc.Layerwise = true }

// Layer-wise, engine A saves its prompt layer by layer and engine B loads
// a shared prefix during the step that computes the rest, waiting per
// layer: the outputs equal a colocated engine's.
func TestLayerwisePrefixReuse(t *testing.T) {
	checkLeaks(t)
	c := newCluster(t)
	base := startEngine(t, nil, nil)
	a := startEngine(t, storeClient(t, c), layerwise)
	p := prompt(200, 1)
	want, _ := base.generate(t, "ref-a", p, 8)
	if got, _ := a.generate(t, "a", p, 8); !slices.Equal(got, want) {
		t.Fatalf("A differs from colocated: %v vs %v", got, want)
	}
	a.flush(t)
	if s := a.conn.Stats(); s.SavedBlocks != 200/16 || s.SaveErrors != 0 || s.DroppedSaves != 0 {
		t.Fatalf("A saved %+v, want %d blocks", s, 200/16)
	}
	b := startEngine(t, storeClient(t, c), layerwise)
	p2 := append(slices.Clone(p[:160]), prompt(50, 9)...)
	want2, _ := base.generate(t, "ref-b", p2, 8)
	got2, out2 := b.generate(t, "b", p2, 8)
	if !slices.Equal(got2, want2) {
		t.Fatalf("B differs from colocated: %v vs %v", got2, want2)
	}
	if s := b.conn.Stats(); s.LoadedTokens != 160 || s.LoadsOK != 1 {
		t.Fatalf("B loaded %+v, want 160 tokens", s)
	}
	if es := b.eng.Stats(); es.ExternalTokens != 160 || out2.NumCachedTokens != 160 || es.PromptTokens != 210-160 || es.WaitingForRemote != 0 {
		t.Fatalf("B engine %+v, cached %d", es, out2.NumCachedTokens)
	}
	b.flush(t)
	if s := b.conn.Stats(); s.SavedBlocks != 3 {
		t.Fatalf("B saved %d blocks, want 3", s.SavedBlocks)
	}
	a.idle(t)
	b.idle(t)
	base.idle(t)
}

// A layer-wise load whose later blocks fail: the step's work for the
// request is dropped and it recomputes from the first failed block.
func TestLayerwiseLoadFailureRecomputes(t *testing.T) {
	checkLeaks(t)
	c := newCluster(t)
	p := prompt(130, 3)
	a, want := seeded(t, c, p, 6)
	fs := &failingStore{Store: storeClient(t, c), failFrom: 3}
	b := startEngine(t, fs, layerwise)
	got, _ := b.generate(t, "b", p, 6)
	if !slices.Equal(got, want) {
		t.Fatalf("after a partial load failure: %v vs %v", got, want)
	}
	s := b.conn.Stats()
	if fs.gets.Load() != 1 || s.LoadsFailed != 1 || s.LoadedTokens != 3*16 {
		t.Fatalf("gets %d stats %+v", fs.gets.Load(), s)
	}
	if es := b.eng.Stats(); es.PromptTokens != 130-3*16 {
		t.Fatalf("B computed %d prompt tokens, want %d", es.PromptTokens, 130-3*16)
	}
	a.idle(t)
	b.idle(t)
}

// A layer-wise load that never answers: the step waits at most
// LoadTimeout, the request recomputes its prompt, nothing leaks.
func TestLayerwiseLoadTimeout(t *testing.T) {
	checkLeaks(t)
	c := newCluster(t)
	p := prompt(120, 6)
	a, want := seeded(t, c, p, 4)
	bs := &blockingStore{Store: storeClient(t, c), entered: make(chan struct{}, 1)}
	b := startEngine(t, bs, func(cc *Config) { cc.Layerwise = true; cc.LoadTimeout = 200 * time.Millisecond })
	start := time.Now()
	got, _ := b.generate(t, "b", p, 4)
	if !slices.Equal(got, want) {
		t.Fatalf("after a load timeout: %v vs %v", got, want)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("answered in %v, before the load timed out", el)
	}
	if s := b.conn.Stats(); s.LoadsFailed != 1 || s.LoadedTokens != 0 {
		t.Fatalf("stats %+v", s)
	}
	if es := b.eng.Stats(); es.PromptTokens != 120 {
		t.Fatalf("B computed %d prompt tokens, want 120", es.PromptTokens)
	}
	a.idle(t)
	b.idle(t)
}

func TestLayerwiseConcurrentRequestsAndSalt(t *testing.T) { concurrentRequestsAndSalt(t, layerwise) }
