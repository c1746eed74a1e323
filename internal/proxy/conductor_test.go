package proxy

import (
	"math"
	"strings"
	"testing"
)

func TestCostModelPrefill(t *testing.T) {
	m := CostModel{Fixed: 0.5, PerToken: 0.01, PerTokenPair: 0.001}
	for _, tc := range []struct {
		n, p int
		want float64
	}{
		{0, 0, 0.5},
		{10, 0, 0.5 + 0.1 + 0.001*50},
		{10, 20, 0.5 + 0.1 + 0.001*(200+50)},
	} {
		if got := m.Prefill(tc.n, tc.p); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Prefill(%d,%d) = %v, want %v", tc.n, tc.p, got, tc.want)
		}
	}
}

func TestConductorPlan(t *testing.T) {
	// 256-byte prompt = 4 blocks of 64; a byte is a token.
	prompt := strings.Repeat("abcdefgh", 32)
	blocks := PromptBlocks(prompt, 64)
	cost := CostModel{Fixed: 1, PerToken: 0.01} // holder: 1s, cold: 1+2.56s
	cands := []Load{{ID: "a"}, {ID: "b"}}
	for _, tc := range []struct {
		name         string
		cachedOnA    int // leading blocks A holds
		queueA       float64
		queueB       float64
		wantID       string
		wantTTFT     float64
		wantPrefixed int
	}{
		{"cache holder wins on equal queues", 4, 0, 0, "a", 1, 256},
		{"cache holder wins with a short queue", 4, 2, 0, "a", 3, 256},
		{"long queue on the holder sends it elsewhere", 4, 3, 0, "b", 3.56, 0},
		{"partial prefix counts", 2, 0, 0, "a", 1 + 1.28, 128},
		{"no cache anywhere: shortest queue", 0, 0.5, 0.25, "b", 0.25 + 3.56, 0},
		{"both queues long: still the lowest estimate", 4, 10, 9, "a", 11, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewConductor(ConductorConfig{Cost: cost})
			c.Routed("a", blocks[:tc.cachedOnA])
			if tc.queueA > 0 {
				c.Enqueue("a", tc.queueA)
			}
			if tc.queueB > 0 {
				c.Enqueue("b", tc.queueB)
			}
			for round := 0; round < 2; round++ { // the tie rotation must not change a strict winner
				pl := c.Plan(blocks, len(prompt), cands)
				if cands[pl.Index].ID != tc.wantID || math.Abs(pl.TTFT-tc.wantTTFT) > 1e-9 || pl.PrefixTokens != tc.wantPrefixed {
					t.Fatalf("round %d: plan %+v (id %s), want id %s ttft %v prefix %d", round, pl, cands[pl.Index].ID, tc.wantID, tc.wantTTFT, tc.wantPrefixed)
				}
				if math.Abs(pl.TTFT-(pl.Queue+pl.Prefill)) > 1e-12 {
					t.Fatalf("TTFT %v != queue %v + prefill %v", pl.TTFT, pl.Queue, pl.Prefill)
				}
			}
		})
	}
}

func TestConductorTiesRotate(t *testing.T) {
	c := NewConductor(ConductorConfig{Cost: CostModel{Fixed: 1}})
	cands := []Load{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	seen := map[int]int{}
	for i := 0; i < 6; i++ {
		seen[c.Plan(nil, 10, cands).Index]++
	}
	if len(seen) != 3 || seen[0] != 2 || seen[1] != 2 || seen[2] != 2 {
		t.Fatalf("equal instances not shared: %v", seen)
	}
}

func TestConductorQueueReleased(t *testing.T) {
	c := NewConductor(ConductorConfig{})
	d1 := c.Enqueue("a", 0.1)
	d2 := c.Enqueue("a", 0.2)
	if s, n := c.Queue("a"); math.Abs(s-0.3) > 1e-12 || n != 2 {
		t.Fatalf("queue %v/%d, want 0.3/2", s, n)
	}
	d1()
	d1() // idempotent: the second call must not remove d2's share
	if s, n := c.Queue("a"); math.Abs(s-0.2) > 1e-12 || n != 1 {
		t.Fatalf("after one done: %v/%d, want 0.2/1", s, n)
	}
	d2()
	if s, n := c.Queue("a"); s != 0 || n != 0 {
		t.Fatalf("after all done: %v/%d, want exactly 0/0", s, n)
	}
	if s, n := c.Queue("nobody"); s != 0 || n != 0 {
		t.Fatalf("unknown instance: %v/%d", s, n)
	}
}

func TestConductorPickUsesWholeBlocks(t *testing.T) {
	c := NewConductor(ConductorConfig{Cost: CostModel{PerToken: 1}})
	blocks := PromptBlocks(strings.Repeat("x", 640), 64)
	c.Routed("b", blocks)
	if i := c.Pick(blocks, []Load{{ID: "a"}, {ID: "b"}}); i != 1 {
		t.Fatalf("Pick = %d, want the cache holder 1", i)
	}
}
