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
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
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
	// LinkRate, when > 0, puts the prefill->decode KV transfer on a link of
	// that many bytes per second: the P/D instances use the TCP transport
	// with the transfer engine's token bucket (transfer.Config.LinkRate).
	LinkRate float64
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
	if c.LinkRate < 0 || math.IsNaN(c.LinkRate) || math.IsInf(c.LinkRate, 0) {
		return fmt.Errorf("--link-rate: %v bytes/s", c.LinkRate)
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
	TailMS      float64 // layer-wise: prefill's writes after its prefill ended (kv_write_tail_ms)
	Layerwise   bool    // kv_layerwise: the KV was streamed layer by layer
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
	Tokens int
	// Coloc is the colocated engine, Disagg the disaggregated cluster with
	// layer-wise KV streaming (the default), Whole the one with
	// whole-request transfer.
	Coloc, Disagg, Whole Sample
	PrefillMS            float64 // colocated TTFT = prefill time
	WriteGBps            float64 // disaggregated KV write GB/s (0 without a write)
	SameGBps             float64 // the engine alone with the write's request size and count (0 without a write or with a link rate)
	// TTFTSavedMS is the median over the requests of (whole-request TTFT -
	// layer-wise TTFT), each pair sent back to back (less noisy than the
	// difference of the medians when the machine's load varies).
	TTFTSavedMS float64
}

// Hidden is the share of the whole-request transfer time that layer-wise
// streaming hid behind the prefill, in [0, 1]: 1 - (layer-wise writes after
// the prefill ended) / (whole-request write time). HiddenTTFT is the same
// seen by the client: the median paired TTFT difference (TTFTSavedMS) /
// whole-request write time (noisier: it includes the spread of the prefill).
func (r SizeResult) Hidden() (tail, ttft float64) {
	if r.Whole.WriteMS <= 0 {
		return 0, 0
	}
	tail = 1 - r.Disagg.TailMS/r.Whole.WriteMS
	ttft = r.TTFTSavedMS / r.Whole.WriteMS
	return min(max(tail, 0), 1), ttft
}

// Result is one run's figures.
type Result struct {
	Model                    string
	Layers, KVHeads, HeadDim int
	KVBytesPerToken          int
	Requests, OutputTokens   int
	PrefillTP, DecodeTP      int
	LinkRate                 float64 // bytes/s of the P/D link (0 = unlimited)
	Engine                   EngineFigure
	Sizes                    []SizeResult
}

// Run starts a colocated instance (cluster.StartInstance) and two
// proxy + prefill + decode clusters (cluster.Up), one streaming the KV layer
// by layer and one transferring whole requests, in this process, measures
// the transfer engine's own throughput, then sends cfg.Requests requests of
// each size to the three and returns the medians. cfg must be valid.
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
	if cfg.LinkRate > 0 {
		inst.Transport, inst.LinkRate = transfer.TransportTCP, cfg.LinkRate
	}
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
	instW := inst
	instW.PDWholeRequest = true
	cw, err := cluster.Up(ctx, cluster.Config{Model: m, Tokenizer: tokenizer.ByteLevel{}, Instance: instW, Logger: log})
	if err != nil {
		return nil, err
	}
	defer cw.Close()
	bpt := 2 * mc.NumKeyValueHeads * mc.Dim() * 4 * mc.NumHiddenLayers
	res := &Result{Model: cfg.Model, Layers: mc.NumHiddenLayers, KVHeads: mc.NumKeyValueHeads, HeadDim: mc.Dim(),
		KVBytesPerToken: bpt, Requests: cfg.Requests, OutputTokens: cfg.OutputTokens,
		PrefillTP: max(1, cfg.PrefillTP), DecodeTP: max(1, cfg.DecodeTP), LinkRate: cfg.LinkRate}

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
		var colS, disS, wholeS []Sample
		var saved []float64
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
			p = RandomPrompt(rng, n-1)
			s, err = Request(ctx, cw.URL, p, cfg.OutputTokens)
			if err != nil {
				return nil, fmt.Errorf("disaggregated (whole-request) %d tokens: %w", n, err)
			}
			if s.Load != "remote" {
				return nil, fmt.Errorf("disaggregated (whole-request) %d tokens: kv_load %q, want remote", n, s.Load)
			}
			wholeS = append(wholeS, s)
			saved = append(saved, float64(s.TTFT-disS[len(disS)-1].TTFT)/1e6)
		}
		slices.Sort(saved)
		sr := SizeResult{Tokens: n, Coloc: Median(colS), Disagg: Median(disS), Whole: Median(wholeS), TTFTSavedMS: saved[len(saved)/2]}
		sr.PrefillMS = float64(sr.Coloc.TTFT) / 1e6
		dm := sr.Disagg
		if dm.WriteMS > 0 {
			sr.WriteGBps = dm.Bytes / (dm.WriteMS / 1e3) / 1e9
		}
		if dm.WriteReqs > 0 && cfg.LinkRate == 0 {
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

// Median is the per-field median of ss (outTokens of the first; Total is
// the median TTFT plus the median time after it).
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
		TTFT: time.Duration(med(func(s Sample) float64 { return float64(s.TTFT) })),
		// Total is the median TTFT plus the median of the rest, so that
		// TPOTMillis is the median time per output token of the samples.
		Total: time.Duration(med(func(s Sample) float64 { return float64(s.TTFT) }) +
			med(func(s Sample) float64 { return float64(s.Total - s.TTFT) })),
		Bytes:     med(func(s Sample) float64 { return s.Bytes }),
		WriteMS:   med(func(s Sample) float64 { return s.WriteMS }),
		PullMS:    med(func(s Sample) float64 { return s.PullMS }),
		WriteReqs: med(func(s Sample) float64 { return s.WriteReqs }),
		TailMS:    med(func(s Sample) float64 { return s.TailMS }),
		Layerwise: ss[0].Layerwise,
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
			s.TailMS, _ = o.KV["kv_write_tail_ms"].(float64)
			s.Layerwise, _ = o.KV["kv_layerwise"].(bool)
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
	eb, err := newEngineBench(ctx, reqSize, count)
	if err != nil {
		return 0, "", err
	}
	defer eb.close()
	for i := 0; i < 5; i++ {
		g, err := eb.run(ctx)
		if err != nil {
			return 0, "", err
		}
		teGBs = max(teGBs, g)
	}
	return teGBs, eb.transport, nil
}

// engineBench is two engines of this process and the writes EngineGBps
// times, ready to run again and again.
type engineBench struct {
	a, b      *transfer.Engine
	reqs      []transfer.Request
	size      int
	transport string
}

func newEngineBench(ctx context.Context, reqSize, count int) (_ *engineBench, err error) {
	if reqSize*count < minTotal {
		count = (minTotal + reqSize - 1) / reqSize
	}
	return newEngineBenchN(ctx, reqSize, count)
}

// newEngineBenchN is newEngineBench for exactly count writes of reqSize.
func newEngineBenchN(ctx context.Context, reqSize, count int) (_ *engineBench, err error) {
	eb := &engineBench{size: reqSize * count}
	defer func() {
		if err != nil {
			eb.close()
		}
	}()
	if eb.a, err = transfer.Open(ctx, transfer.Config{}); err != nil {
		return nil, err
	}
	if eb.b, err = transfer.Open(ctx, transfer.Config{}); err != nil {
		return nil, err
	}
	src, err := eb.a.AllocateManaged(eb.size)
	if err != nil {
		return nil, err
	}
	dst, err := eb.b.AllocateManaged(eb.size)
	if err != nil {
		return nil, err
	}
	for i := range src {
		src[i] = byte(i)
	}
	seg, err := eb.a.OpenSegment(ctx, eb.b.Name())
	if err != nil {
		return nil, err
	}
	for i := 0; i < count; i++ {
		eb.reqs = append(eb.reqs, transfer.Request{Op: transfer.OpWrite, Local: transfer.AddrOf(src) + uintptr(i*reqSize),
			Segment: seg, Remote: uint64(transfer.AddrOf(dst)) + uint64(i*reqSize), Length: reqSize})
	}
	batch, err := eb.a.Submit(ctx, eb.reqs)
	if err != nil {
		return nil, err
	}
	defer batch.Free()
	if err := batch.Wait(ctx); err != nil {
		return nil, err
	}
	eb.transport = batch.Transport(0)
	return eb, nil
}

// run times one Transfer of every write: GB/s.
func (eb *engineBench) run(ctx context.Context) (float64, error) {
	t := time.Now()
	if err := eb.a.Transfer(ctx, eb.reqs); err != nil {
		return 0, err
	}
	return float64(eb.size) / time.Since(t).Seconds() / 1e9, nil
}

// runEach times the writes one transfer each, one after the other, and
// returns their bytes over the sum of their times (GB/s), as a layer-wise
// stream's write time is summed.
func (eb *engineBench) runEach(ctx context.Context) (float64, error) {
	var busy time.Duration
	for i := range eb.reqs {
		t := time.Now()
		if err := eb.a.Transfer(ctx, eb.reqs[i:i+1]); err != nil {
			return 0, err
		}
		busy += time.Since(t)
	}
	return float64(eb.size) / busy.Seconds() / 1e9, nil
}

func (eb *engineBench) close() {
	if eb.a != nil {
		eb.a.Close()
	}
	if eb.b != nil {
		eb.b.Close()
	}
}

// ParseRate reads a link rate: a number with an optional unit, bits
// (Kbit, Mbit, Gbit: 10^3, 10^6, 10^9 bits per second) or bytes (KB, MB,
// GB decimal; KiB, MiB, GiB binary; B or none: bytes) per second, an
// optional "/s" after it: "1Gbit", "100Mbit/s", "12.5MB", "2MiB". It returns
// bytes per second.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	v, err := strconv.ParseFloat(t[:i], 64)
	if err != nil || v < 0 || math.IsInf(v, 0) {
		return 0, fmt.Errorf("link rate %q: want a number and a unit (e.g. 1Gbit, 100Mbit, 12.5MB, 2MiB)", s)
	}
	units := map[string]float64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
		"bit": 1.0 / 8, "Kbit": 1e3 / 8, "Mbit": 1e6 / 8, "Gbit": 1e9 / 8}
	u, ok := units[strings.TrimSpace(t[i:])]
	if !ok {
		return 0, fmt.Errorf("link rate %q: unknown unit %q (want bit, Kbit, Mbit, Gbit, B, KB, MB, GB, KiB, MiB, GiB)", s, t[i:])
	}
	return v * u, nil
}
