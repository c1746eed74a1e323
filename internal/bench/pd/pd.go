package pd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/bench/limits"
	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
	"github.com/kvcache-go/mooncake/transfer"
)

// Config is one run of the benchmark.
type Config struct {
	Model        string // built-in model: tiny or small
	Sizes        []int  // prompt sizes in tokens (each >= 2)
	Requests     int    // requests per size and mode (>= 1; medians are reported)
	OutputTokens int    // tokens generated per request (>= 2)
	Seed         uint64 // weight and prompt seed
	// PrefillTP and DecodeTP are the tensor-parallel sizes of the prefill
	// and decode engines (0 = 1; each must divide the model's KV heads:
	// tiny-tp splits across 4). The colocated engine runs TP 1.
	PrefillTP, DecodeTP int
}

// Validate checks the run before anything starts.
func (c Config) Validate() error {
	if len(c.Sizes) == 0 {
		return errors.New("--sizes: no prompt size")
	}
	for _, n := range c.Sizes {
		if n < 2 {
			return fmt.Errorf("--sizes: %d is not a token count >= 2", n)
		}
	}
	if c.Requests < 1 || c.OutputTokens < 2 {
		return errors.New("--requests must be >= 1 and --output-tokens >= 2")
	}
	mc, err := model.Builtin(c.Model)
	if err != nil {
		return err
	}
	for _, tp := range []int{max(1, c.PrefillTP), max(1, c.DecodeTP)} {
		if err := mc.CheckTP(tp); err != nil {
			return fmt.Errorf("--prefill-tp/--decode-tp: %w", err)
		}
	}
	return nil
}

// Sample is one streamed request's figures (or the medians of several).
type Sample struct {
	TTFT, Total time.Duration
	Bytes       float64 // KV bytes pulled (kv_pull_bytes)
	WriteMS     float64 // prefill's KV write time (kv_write_ms)
	PullMS      float64 // decode's KV pull time (kv_pull_ms)
	WriteReqs   float64 // transfer requests of the write (kv_write_requests)
	Load        string  // kv_load: "remote" when the KV came from the prefill
	OutTokens   int
}

// EngineFigure is the transfer engine's own throughput in the same run.
type EngineFigure struct {
	Transport    string  // the transport that served the writes
	RequestBytes int     // bytes per WRITE
	GBps         float64 // engine writes, best of 5
	MemcpyGBps   float64 // single-thread memcpy (limits.Memcpy)
}

// SizeResult is the medians at one prompt size.
type SizeResult struct {
	Tokens        int
	Coloc, Disagg Sample
	PrefillMS     float64 // colocated TTFT = prefill time
	WriteGBps     float64 // disaggregated KV write GB/s (0 without a write)
	SameGBps      float64 // the engine alone with the write's request size and count (0 without a write)
}

// Result is one run's figures.
type Result struct {
	Model                    string
	Layers, KVHeads, HeadDim int
	KVBytesPerToken          int
	Requests, OutputTokens   int
	PrefillTP, DecodeTP      int
	Engine                   EngineFigure
	Sizes                    []SizeResult
}

// Run starts a colocated instance (cluster.StartInstance) and a
// proxy + prefill + decode cluster (cluster.Up) in this process, measures the
// transfer engine's own throughput, then sends cfg.Requests requests of each
// size to both and returns the medians. cfg must be valid.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mc, err := model.Builtin(cfg.Model)
	if err != nil {
		return nil, err
	}
	maxLen := slices.Max(cfg.Sizes) + cfg.OutputTokens + 16
	if mc.MaxPositionEmbeddings < maxLen {
		mc.MaxPositionEmbeddings = maxLen
	}
	m, err := model.NewRandom(cfg.Model, mc, cfg.Seed)
	if err != nil {
		return nil, err
	}
	blocks := (maxLen/16 + 8) * 2
	log := slog.New(slog.DiscardHandler)
	inst := cluster.InstanceConfig{NumBlocks: blocks, Logger: log, PullTimeout: 10 * time.Minute}
	col, err := cluster.StartInstance(ctx, cluster.InstanceConfig{Model: m, NumBlocks: blocks, Logger: log})
	if err != nil {
		return nil, err
	}
	defer col.Close()
	c, err := cluster.Up(ctx, cluster.Config{Model: m, Tokenizer: tokenizer.ByteLevel{}, Instance: inst, Logger: log,
		PrefillTP: max(1, cfg.PrefillTP), DecodeTP: max(1, cfg.DecodeTP)})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	bpt := 2 * mc.NumKeyValueHeads * mc.Dim() * 4 * mc.NumHiddenLayers
	res := &Result{Model: cfg.Model, Layers: mc.NumHiddenLayers, KVHeads: mc.NumKeyValueHeads, HeadDim: mc.Dim(),
		KVBytesPerToken: bpt, Requests: cfg.Requests, OutputTokens: cfg.OutputTokens,
		PrefillTP: max(1, cfg.PrefillTP), DecodeTP: max(1, cfg.DecodeTP)}

	// The transfer engine's own throughput, same transport, same process:
	// one WRITE per layer of the 2048-token (or largest) KV size.
	teBytes := min(2048, slices.Max(cfg.Sizes)) * bpt
	reqSize := teBytes / mc.NumHiddenLayers
	res.Engine.RequestBytes = reqSize
	if res.Engine.GBps, res.Engine.Transport, err = EngineGBps(ctx, reqSize, mc.NumHiddenLayers); err != nil {
		return nil, fmt.Errorf("transfer engine bench: %w", err)
	}
	// Memcpy over the same bytes as the engine's writes (at least 64 MiB).
	res.Engine.MemcpyGBps = limits.Memcpy(max(reqSize*mc.NumHiddenLayers, minTotal), 0, 250*time.Millisecond)

	rng := rand.New(rand.NewPCG(cfg.Seed, 42))
	for _, n := range cfg.Sizes {
		var colS, disS []Sample
		for i := 0; i < cfg.Requests; i++ {
			p := RandomPrompt(rng, n-1) // + BOS = n tokens
			s, err := Request(ctx, col.URL, p, cfg.OutputTokens)
			if err != nil {
				return nil, fmt.Errorf("colocated %d tokens: %w", n, err)
			}
			colS = append(colS, s)
			p = RandomPrompt(rng, n-1)
			s, err = Request(ctx, c.URL, p, cfg.OutputTokens)
			if err != nil {
				return nil, fmt.Errorf("disaggregated %d tokens: %w", n, err)
			}
			if s.Load != "remote" {
				return nil, fmt.Errorf("disaggregated %d tokens: kv_load %q, want remote", n, s.Load)
			}
			disS = append(disS, s)
		}
		sr := SizeResult{Tokens: n, Coloc: Median(colS), Disagg: Median(disS)}
		sr.PrefillMS = float64(sr.Coloc.TTFT) / 1e6
		dm := sr.Disagg
		if dm.WriteMS > 0 {
			sr.WriteGBps = dm.Bytes / (dm.WriteMS / 1e3) / 1e9
		}
		if dm.WriteReqs > 0 {
			// The transfer engine alone with the same request size and count.
			if sr.SameGBps, _, err = EngineGBps(ctx, int(dm.Bytes/dm.WriteReqs), int(dm.WriteReqs)); err != nil {
				return nil, fmt.Errorf("transfer engine bench: %w", err)
			}
		}
		res.Sizes = append(res.Sizes, sr)
	}
	return res, nil
}

// TPOTMillis is the time per output token after the first, in ms.
func (s Sample) TPOTMillis() float64 {
	return float64(s.Total-s.TTFT) / 1e6 / float64(max(1, s.OutTokens-1))
}

// Median is the per-field median of ss (outTokens of the first).
func Median(ss []Sample) Sample {
	med := func(f func(Sample) float64) float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return Sample{
		TTFT:      time.Duration(med(func(s Sample) float64 { return float64(s.TTFT) })),
		Total:     time.Duration(med(func(s Sample) float64 { return float64(s.Total) })),
		Bytes:     med(func(s Sample) float64 { return s.Bytes }),
		WriteMS:   med(func(s Sample) float64 { return s.WriteMS }),
		PullMS:    med(func(s Sample) float64 { return s.PullMS }),
		WriteReqs: med(func(s Sample) float64 { return s.WriteReqs }),
		OutTokens: ss[0].OutTokens,
	}
}

// RandomPrompt is n random lowercase letters.
func RandomPrompt(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return string(b)
}

// Request streams one greedy completion of outTokens tokens from base
// (an OpenAI server or proxy) and measures it.
func Request(ctx context.Context, base, prompt string, outTokens int) (Sample, error) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": outTokens, "temperature": 0,
		"stream": true, "ignore_eos": true, "return_token_ids": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return Sample{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	s := Sample{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") || line == "data: [DONE]" {
			continue
		}
		var o struct {
			Choices []struct {
				TokenIDs []int `json:"token_ids"`
			} `json:"choices"`
			KV map[string]any `json:"kv_transfer_params"`
		}
		if err := json.Unmarshal([]byte(line[6:]), &o); err != nil {
			return s, err
		}
		for _, c := range o.Choices {
			if len(c.TokenIDs) > 0 && s.TTFT == 0 {
				s.TTFT = time.Since(start)
			}
			s.OutTokens += len(c.TokenIDs)
		}
		if o.KV != nil {
			s.Load, _ = o.KV["kv_load"].(string)
			s.Bytes, _ = o.KV["kv_pull_bytes"].(float64)
			s.WriteMS, _ = o.KV["kv_write_ms"].(float64)
			s.PullMS, _ = o.KV["kv_pull_ms"].(float64)
			s.WriteReqs, _ = o.KV["kv_write_requests"].(float64)
		}
	}
	s.Total = time.Since(start)
	if s.OutTokens == 0 {
		s.OutTokens = outTokens
	}
	return s, sc.Err()
}

// minTotal is the least number of bytes EngineGBps moves per run.
const minTotal = 64 << 20

// EngineGBps measures the transfer engine writing count requests of
// reqSize bytes between two engines of this process (managed memory, auto
// transport: what the P/D path uses) over at least 64 MiB (larger than the
// CPU caches, as KV blocks are): GB/s of the best of 5 runs, and the
// transport that served them.
func EngineGBps(ctx context.Context, reqSize, count int) (teGBs float64, transport string, err error) {
	if reqSize*count < minTotal {
		count = (minTotal + reqSize - 1) / reqSize
	}
	size := reqSize * count
	a, err := transfer.Open(ctx, transfer.Config{})
	if err != nil {
		return 0, "", err
	}
	defer a.Close()
	b, err := transfer.Open(ctx, transfer.Config{})
	if err != nil {
		return 0, "", err
	}
	defer b.Close()
	src, err := a.AllocateManaged(size)
	if err != nil {
		return 0, "", err
	}
	dst, err := b.AllocateManaged(size)
	if err != nil {
		return 0, "", err
	}
	for i := range src {
		src[i] = byte(i)
	}
	seg, err := a.OpenSegment(ctx, b.Name())
	if err != nil {
		return 0, "", err
	}
	var reqs []transfer.Request
	for i := 0; i < count; i++ {
		reqs = append(reqs, transfer.Request{Op: transfer.OpWrite, Local: transfer.AddrOf(src) + uintptr(i*reqSize),
			Segment: seg, Remote: uint64(transfer.AddrOf(dst)) + uint64(i*reqSize), Length: reqSize})
	}
	run := func(f func() error) (float64, error) {
		var best time.Duration
		for i := 0; i < 5; i++ {
			t := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			if d := time.Since(t); i == 0 || d < best {
				best = d
			}
		}
		return float64(size) / best.Seconds() / 1e9, nil
	}
	batch, err := a.Submit(ctx, reqs)
	if err != nil {
		return 0, "", err
	}
	if err := batch.Wait(ctx); err != nil {
		return 0, "", err
	}
	transport = batch.Transport(0)
	batch.Free()
	if teGBs, err = run(func() error { return a.Transfer(ctx, reqs) }); err != nil {
		return 0, "", err
	}
	return teGBs, transport, nil
}
