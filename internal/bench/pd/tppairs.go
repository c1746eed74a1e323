package pd

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
)

// PairsConfig is a run over tensor-parallel pairs: the KV transfer of
// every pair measured in one process, against the transfer engine's own
// 1 MiB writes measured in the same run.
type PairsConfig struct {
	Model        string
	Tokens       int      // prompt size (>= 2)
	Requests     int      // requests per pair and mode (medians)
	Warmup       int      // requests per pair and mode sent first, not measured
	OutputTokens int      // tokens generated per request (>= 2)
	Seed         uint64   // weight and prompt seed
	Pairs        [][2]int // (prefill TP, decode TP)
	Modes        []string // "layer" (layer-wise streaming) and/or "whole" (whole-request)
}

// Validate checks the run before anything starts.
func (c PairsConfig) Validate() error {
	if c.Tokens < 2 || c.Requests < 1 || c.OutputTokens < 2 || len(c.Pairs) == 0 || len(c.Modes) == 0 {
		return fmt.Errorf("tp pairs: need a size >= 2, >= 1 request, >= 2 output tokens, a pair and a mode")
	}
	mc, err := model.Builtin(c.Model)
	if err != nil {
		return err
	}
	for _, p := range c.Pairs {
		for _, tp := range p {
			if err := mc.CheckTP(tp); err != nil {
				return fmt.Errorf("--tp-pairs: %w", err)
			}
		}
	}
	for _, m := range c.Modes {
		if m != "layer" && m != "whole" {
			return fmt.Errorf("tp pairs: mode %q (layer, whole)", m)
		}
	}
	return nil
}

// PairResult is one pair's KV transfer in one mode: the medians over the
// requests of the write's figures (kv_write_ms, kv_write_requests), the
// best and the median of its GB/s.
type PairResult struct {
	PrefillTP, DecodeTP int
	Mode                string
	Bytes               float64 // KV bytes per transfer
	WriteReqs, WriteMS  float64
	GBps                float64   // best of the requests' bytes / write time
	MedianGBps          float64   // their median
	WriteMSAll          []float64 // every request's write time, in order
}

// PairsResult is a TP-pairs run.
type PairsResult struct {
	Model    string
	Tokens   int
	Requests int
	// The model's KV geometry: Layers layers of KVHeads heads of HeadDim
	// (float32 K and V), KVBytesPerToken over all layers; a transfer moves
	// about Tokens of them.
	Layers, KVHeads, HeadDim, KVBytesPerToken int
	// Engine is the transfer engine's 1 MiB writes over 64 MiB: the best
	// over the rounds of one timed transfer per round (EngineMedian: their
	// median).
	Engine       EngineFigure
	EngineMedian float64
	// Shaped is the transfer engine's writes in the shape of a layer-wise
	// KV transfer (of its first layer-mode pair), measured in the same
	// rounds with nothing else running: as many writes of the same size,
	// one transfer each, their times summed. It tells the cost of the
	// request size apart from that of sharing the machine with the
	// prefill (zero without a layer mode).
	Shaped ShapedFigure
	Pairs  []PairResult
}

// ShapedFigure is the engine's layer-shaped writes: Requests writes of
// RequestBytes, best and median GB/s over the rounds.
type ShapedFigure struct {
	RequestBytes, Requests int
	GBps, Median           float64
}

// SameTP is the GB/s (best; median with median set) of the equal-TP
// pairs P->P and Q->Q of mode measured in the run (their mean; one when
// only one was measured; 0 for none).
func (r *PairsResult) SameTP(p, q int, mode string, median bool) float64 {
	var sum float64
	n := 0
	for _, x := range r.Pairs {
		if x.Mode == mode && x.PrefillTP == x.DecodeTP && (x.PrefillTP == p || x.PrefillTP == q) {
			if median {
				sum += x.MedianGBps
			} else {
				sum += x.GBps
			}
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// ExtraPerWrite is how much longer each write of pair p took (best
// round) than moving its bytes at the engine's best 1 MiB rate: the
// per-request cost the transfer adds beyond its bytes (negative when it
// ran faster than the engine). Zero when either rate is unknown.
func (r *PairsResult) ExtraPerWrite(p PairResult) time.Duration {
	if p.GBps <= 0 || r.Engine.GBps <= 0 || p.WriteReqs <= 0 {
		return 0
	}
	ns := (p.Bytes/p.GBps - p.Bytes/r.Engine.GBps) / p.WriteReqs // bytes / (GB/s) = ns
	return time.Duration(ns)
}

// RunPairs starts, for every pair and mode, a proxy + prefill + decode
// cluster (cluster.Up) with that TP on each side, all at once, then runs
// cfg.Warmup + cfg.Requests rounds: each round times one transfer of the
// engine's 1 MiB writes (engineBench) and sends one request of cfg.Tokens
// tokens to every cluster in turn, so that the load of a shared machine
// weighs on every pair and on the engine alike. The first cfg.Warmup
// rounds are not counted; figures are the best and the median over the
// others (on a shared machine the best is the uncontended cost, the
// median carries the other jobs' load).
func RunPairs(ctx context.Context, cfg PairsConfig) (*PairsResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mc, err := model.Builtin(cfg.Model)
	if err != nil {
		return nil, err
	}
	maxLen := cfg.Tokens + cfg.OutputTokens + 16
	if mc.MaxPositionEmbeddings < maxLen {
		mc.MaxPositionEmbeddings = maxLen
	}
	m, err := model.NewRandom(cfg.Model, mc, cfg.Seed)
	if err != nil {
		return nil, err
	}
	res := &PairsResult{Model: cfg.Model, Tokens: cfg.Tokens, Requests: cfg.Requests,
		Layers: mc.NumHiddenLayers, KVHeads: mc.NumKeyValueHeads, HeadDim: mc.Dim(), KVBytesPerToken: mc.KVBytesPerToken()}
	const mib = 1 << 20
	eb, err := newEngineBench(ctx, mib, 64)
	if err != nil {
		return nil, fmt.Errorf("transfer engine bench: %w", err)
	}
	defer eb.close()
	res.Engine.Transport, res.Engine.RequestBytes = eb.transport, mib
	log := slog.New(slog.DiscardHandler)
	type run struct {
		c    *cluster.Cluster
		pr   PairResult
		ss   []Sample
		gbps []float64
	}
	var runs []*run
	defer func() {
		for _, r := range runs {
			r.c.Close()
		}
	}()
	for _, mode := range cfg.Modes {
		for _, p := range cfg.Pairs {
			inst := cluster.InstanceConfig{NumBlocks: (maxLen/16 + 8) * 2, Logger: log, PullTimeout: 10 * time.Minute, PDWholeRequest: mode == "whole"}
			c, err := cluster.Up(ctx, cluster.Config{Model: m, Tokenizer: tokenizer.ByteLevel{}, Instance: inst, Logger: log,
				PrefillTP: p[0], DecodeTP: p[1]})
			if err != nil {
				return nil, err
			}
			runs = append(runs, &run{c: c, pr: PairResult{PrefillTP: p[0], DecodeTP: p[1], Mode: mode}})
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 43))
	var engine, shaped []float64
	var sb *engineBench
	defer func() {
		if sb != nil {
			sb.close()
		}
	}()
	for round := 0; round < cfg.Warmup+cfg.Requests; round++ {
		counted := round >= cfg.Warmup
		g, err := eb.run(ctx)
		if err != nil {
			return nil, fmt.Errorf("transfer engine bench: %w", err)
		}
		if counted {
			engine = append(engine, g)
		}
		for _, r := range runs {
			s, err := Request(ctx, r.c.URL, RandomPrompt(rng, cfg.Tokens-1), cfg.OutputTokens)
			if err == nil && s.Load != "remote" {
				err = fmt.Errorf("kv_load %q, want remote", s.Load)
			}
			if err != nil {
				return nil, fmt.Errorf("tp %d -> %d (%s): %w", r.pr.PrefillTP, r.pr.DecodeTP, r.pr.Mode, err)
			}
			if !counted {
				continue
			}
			r.ss = append(r.ss, s)
			r.pr.WriteMSAll = append(r.pr.WriteMSAll, s.WriteMS)
			if s.WriteMS > 0 {
				r.gbps = append(r.gbps, s.Bytes/(s.WriteMS/1e3)/1e9)
			}
		}
		if sb == nil {
			// The layer-wise shape, from the first layer-mode pair's request.
			for _, r := range runs {
				if r.pr.Mode == "layer" && len(r.ss) > 0 && r.ss[0].WriteReqs >= 1 {
					n := int(r.ss[0].WriteReqs)
					if sb, err = newEngineBenchN(ctx, int(r.ss[0].Bytes)/n, n); err != nil {
						return nil, fmt.Errorf("transfer engine bench: %w", err)
					}
					res.Shaped.RequestBytes, res.Shaped.Requests = int(r.ss[0].Bytes)/n, n
					break
				}
			}
		}
		if sb != nil && counted {
			g, err := sb.runEach(ctx)
			if err != nil {
				return nil, fmt.Errorf("transfer engine bench: %w", err)
			}
			shaped = append(shaped, g)
		}
	}
	res.Engine.GBps, res.EngineMedian = slices.Max(engine), median(engine)
	if len(shaped) > 0 {
		res.Shaped.GBps, res.Shaped.Median = slices.Max(shaped), median(shaped)
	}
	for _, r := range runs {
		md := Median(r.ss)
		r.pr.Bytes, r.pr.WriteReqs, r.pr.WriteMS, r.pr.MedianGBps = md.Bytes, md.WriteReqs, md.WriteMS, median(r.gbps)
		if len(r.gbps) > 0 {
			r.pr.GBps = slices.Max(r.gbps)
		}
		res.Pairs = append(res.Pairs, r.pr)
	}
	return res, nil
}

// median of v (0 for none); v is sorted in place.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}
