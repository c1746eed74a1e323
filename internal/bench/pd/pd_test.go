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
		"rate":     func(c *Config) { c.LinkRate = -1 },
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
		if !s.Disagg.Layerwise || s.Whole.Layerwise || s.Whole.Bytes != s.Disagg.Bytes || s.Whole.WriteMS <= 0 {
			t.Errorf("%d tokens: layer-wise %+v, whole-request %+v", s.Tokens, s.Disagg, s.Whole)
		}
	}
}

// TestRunLinkRate: on a link of 256 KB/s a 384-token prompt's KV (192
// KiB) takes >= 0.5 s to write whole (the first 64 KiB burst aside);
// streamed layer by layer it moves the same bytes, and not all of it after
// the prefill ended.
func TestRunLinkRate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := Run(ctx, Config{Model: "tiny", Sizes: []int{384}, Requests: 1, OutputTokens: 3, Seed: 1, LinkRate: 256e3})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Sizes[0]
	t.Logf("whole %+v layer %+v", s.Whole, s.Disagg)
	if s.Whole.WriteMS < 500 || s.Disagg.Bytes != s.Whole.Bytes || s.SameGBps != 0 {
		t.Fatalf("whole-request write %v ms of %v bytes (want >= 500 ms at 256 KB/s), layer-wise %v bytes", s.Whole.WriteMS, s.Whole.Bytes, s.Disagg.Bytes)
	}
	if !s.Disagg.Layerwise || s.Disagg.TailMS >= s.Whole.WriteMS {
		t.Fatalf("layer-wise tail %v ms >= whole-request write %v ms", s.Disagg.TailMS, s.Whole.WriteMS)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"1Gbit": 125e6, "100Mbit/s": 12.5e6, "12.5MB": 12.5e6, "2MiB": 2 << 20, "1000": 1000, "8bit": 1, "3 KB": 3000} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "1Tbit", "-1MB", "1..2MB"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}

// TestRunTP: prefill TP 4 to decode TP 2 (tiny-tp): the whole KV moves,
// with one scatter-gather write per layer.
func TestRunTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := Run(ctx, Config{Model: "tiny-tp", Sizes: []int{64}, Requests: 1, OutputTokens: 3, Seed: 1, PrefillTP: 4, DecodeTP: 2})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Sizes[0]
	if r.PrefillTP != 4 || r.DecodeTP != 2 || s.Disagg.Bytes != float64(64*r.KVBytesPerToken) || s.Disagg.WriteReqs != 2 || s.WriteGBps <= 0 {
		t.Fatalf("result %+v, size %+v", r, s)
	}
}

// TestRunPairs: an equal and a mixed TP pair in one run, both modes; every
// pair moves the whole KV with one write per layer, and the mixed pair's ratio to the equal one is computed.
func TestRunPairs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := RunPairs(ctx, PairsConfig{Model: "tiny-tp", Tokens: 64, Requests: 1, Warmup: 1, OutputTokens: 3, Seed: 1,
		Pairs: [][2]int{{2, 2}, {1, 4}}, Modes: []string{"layer", "whole"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Pairs) != 4 || r.Engine.GBps <= 0 || r.Engine.RequestBytes != 1<<20 {
		t.Fatalf("result %+v", r)
	}
	for _, p := range r.Pairs {
		if p.Bytes != float64(64*2*4*16*4*2) || p.WriteReqs != 2 || p.GBps <= 0 || p.MedianGBps <= 0 || len(p.WriteMSAll) != 1 {
			t.Fatalf("pair %+v", p)
		}
	}
	// The engine's layer-shaped writes: as many writes as the layer-wise
	// transfer made, of its size.
	if r.Shaped.Requests != 2 || r.Shaped.RequestBytes != 64*2*4*16*4 || r.Shaped.GBps <= 0 || r.Shaped.Median <= 0 {
		t.Fatalf("layer-shaped engine figure %+v", r.Shaped)
	}
	if r.SameTP(2, 4, "whole", false) <= 0 || r.SameTP(2, 4, "whole", true) <= 0 || r.SameTP(1, 1, "whole", false) != 0 {
		t.Fatal("same-TP reference")
	}
	if err := (PairsConfig{Model: "tiny-tp", Tokens: 64, Requests: 1, OutputTokens: 3, Pairs: [][2]int{{3, 1}}, Modes: []string{"layer"}}).Validate(); err == nil {
		t.Fatal("TP 3 of 4 KV heads accepted")
	}
}

// ExtraPerWrite: a pair at half the engine's rate spends, per write, as
// long again as the engine needs for that write's bytes.
func TestExtraPerWrite(t *testing.T) {
	r := &PairsResult{Engine: EngineFigure{GBps: 8}}
	// 8 MiB in 4 writes at 4 GB/s: 2,097,152 ns in all, 1,048,576 ns of it
	// beyond the engine's, 262,144 ns per write.
	if got := r.ExtraPerWrite(PairResult{Bytes: 8 << 20, GBps: 4, WriteReqs: 4}); got != 262144*time.Nanosecond {
		t.Fatalf("extra per write %v", got)
	}
	if got := r.ExtraPerWrite(PairResult{Bytes: 8 << 20, WriteReqs: 4}); got != 0 {
		t.Fatalf("no rate: %v", got)
	}
}
