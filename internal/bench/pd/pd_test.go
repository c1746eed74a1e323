package pd

import (
	"context"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := Config{Model: "tiny", Sizes: []int{64}, Requests: 1, OutputTokens: 2}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"no sizes": func(c *Config) { c.Sizes = nil },
		"size 1":   func(c *Config) { c.Sizes = []int{1} },
		"requests": func(c *Config) { c.Requests = 0 },
		"tokens":   func(c *Config) { c.OutputTokens = 1 },
		"model":    func(c *Config) { c.Model = "huge" },
		"tp":       func(c *Config) { c.DecodeTP = 4 }, // tiny has 2 KV heads
	} {
		c := ok
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestMedian(t *testing.T) {
	m := Median([]Sample{{TTFT: 3, Total: 30, Bytes: 1, OutTokens: 4}, {TTFT: 1, Total: 10, Bytes: 3}, {TTFT: 2, Total: 20, Bytes: 2}})
	if m.TTFT != 2 || m.Total != 20 || m.Bytes != 2 || m.OutTokens != 4 {
		t.Fatalf("median %+v", m)
	}
	if got := (Sample{TTFT: time.Millisecond, Total: 4 * time.Millisecond, OutTokens: 4}).TPOTMillis(); got != 1 {
		t.Fatalf("TPOT %v ms, want 1", got)
	}
}

// TestRun runs the tiny model colocated and disaggregated once per size.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := Run(ctx, Config{Model: "tiny", Sizes: []int{32, 64}, Requests: 1, OutputTokens: 3, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.KVBytesPerToken != 2*2*16*4*2 || r.Engine.GBps <= 0 || r.Engine.MemcpyGBps <= 0 || r.Engine.Transport == "" || len(r.Sizes) != 2 {
		t.Fatalf("result %+v", r)
	}
	for _, s := range r.Sizes {
		if s.Disagg.Bytes != float64(s.Tokens*r.KVBytesPerToken) || s.PrefillMS <= 0 || s.SameGBps <= 0 {
			t.Errorf("%d tokens: %+v", s.Tokens, s)
		}
	}
}

// TestRunTP: prefill TP 4 to decode TP 2 (tiny-tp): the whole KV moves,
// with one write request per block, layer and overlapping rank pair.
func TestRunTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := Run(ctx, Config{Model: "tiny-tp", Sizes: []int{64}, Requests: 1, OutputTokens: 3, Seed: 1, PrefillTP: 4, DecodeTP: 2})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Sizes[0]
	if r.PrefillTP != 4 || r.DecodeTP != 2 || s.Disagg.Bytes != float64(64*r.KVBytesPerToken) || s.Disagg.WriteReqs != 2*4*4 || s.WriteGBps <= 0 {
		t.Fatalf("result %+v, size %+v", r, s)
	}
}
