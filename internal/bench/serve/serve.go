package serve

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/kvcache-go/mooncake/internal/bench/limits"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/model"
)

// Result is one run's figures (the --json object).
type Result struct {
	Model                 string        `json:"model"`
	Params                int           `json:"params"`
	Cores                 int           `json:"cores"`
	KVBytesPerToken       int           `json:"kv_bytes_per_token"`
	KernelGFLOPS          float64       `json:"kernel_gflops"`
	MemcpyGBps            float64       `json:"memcpy_gbps"`
	PromptLen             int           `json:"prompt_len"`
	TTFTColdSeconds       float64       `json:"ttft_cold_s"`
	TTFTHitSeconds        float64       `json:"ttft_prefix_hit_s"`
	TTFTSpeedup           float64       `json:"ttft_cold_over_hit"`
	PromptTokensPerSecond float64       `json:"prompt_tokens_per_s"`
	PrefillGFLOPS         float64       `json:"prefill_gflops"`
	PrefillOverKernel     float64       `json:"prefill_over_kernel"`
	Decode                []DecodePoint `json:"decode"`
}

// DecodePoint is the decode figure at one batch size.
type DecodePoint struct {
	Batch               int     `json:"batch"`
	StepMillis          float64 `json:"step_ms"`
	OutputTokensPerSec  float64 `json:"output_tokens_per_s"`
	WeightGBps          float64 `json:"weight_read_gbps"`
	WeightGBpsOverMemcp float64 `json:"weight_read_over_memcpy"`
	GFLOPS              float64 `json:"gflops"`
	GFLOPSOverKernel    float64 `json:"gflops_over_kernel"`
}

// Prompt is a deterministic prompt of n token ids; salt varies it.
func Prompt(n, salt int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = (i*131 + salt*977 + (i/7)*13) % 256
	}
	return p
}

// Run measures m in a fresh engine: TTFT of a promptLen prompt cold and
// with a full prefix-cache hit, then decode of decode tokens at each batch
// size, next to the kernel GFLOP/s (best of before and after) and
// single-thread memcpy GB/s of this machine.
func Run(ctx context.Context, m *model.Model, promptLen, decode int, batches []int) (*Result, error) {
	maxBatch := 0
	for _, b := range batches {
		maxBatch = max(maxBatch, b)
	}
	numBlocks := 2*(promptLen+16)/16 + maxBatch*(64+decode+32)/16 + 64
	eng, err := engine.New(engine.Config{Model: m, NumBlocks: numBlocks, MaxNumSeqs: max(64, maxBatch),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	res := &Result{Model: m.Name, Params: m.NumParams(), Cores: runtime.GOMAXPROCS(0),
		KVBytesPerToken: eng.KVCaches().Layout.BytesPerToken(), PromptLen: promptLen}
	res.KernelGFLOPS = model.KernelFLOPS(0, time.Second) / 1e9
	res.MemcpyGBps = limits.Memcpy(64<<20, 64<<20, 500*time.Millisecond)

	ttft := func(id string, p []int) (time.Duration, error) {
		st, err := eng.Submit(engine.Request{ID: id, Prompt: p, Params: engine.SamplingParams{MaxTokens: 1, IgnoreEOS: true}})
		if err != nil {
			return 0, err
		}
		start := time.Now()
		for i := 0; ; i++ {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			eng.Step(ctx)
			if s := eng.Stats(); s.Running+s.Waiting == 0 && i > 0 {
				break
			}
		}
		d := time.Since(start)
		_, out, err := st.Collect(ctx)
		if err != nil || out.FinishReason != engine.FinishLength {
			return 0, fmt.Errorf("bench request %s: %v %+v", id, err, out)
		}
		return d, nil
	}
	p := Prompt(promptLen, 1)
	cold, err := ttft("cold", p)
	if err != nil {
		return nil, err
	}
	hit, err := ttft("hit", p)
	if err != nil {
		return nil, err
	}
	res.TTFTColdSeconds, res.TTFTHitSeconds = cold.Seconds(), hit.Seconds()
	res.TTFTSpeedup = cold.Seconds() / hit.Seconds()
	res.PromptTokensPerSecond = float64(promptLen) / cold.Seconds()
	head := 2 * float64(m.Config.VocabSize*m.Config.HiddenSize)
	flops := head
	for pos := 0; pos < promptLen; pos++ {
		flops += m.FLOPsPerToken(pos) - head
	}
	res.PrefillGFLOPS = flops / cold.Seconds() / 1e9

	weightBytes := float64(4 * m.NumParams())
	for bi, b := range batches {
		var streams []*engine.Stream
		for i := 0; i < b; i++ {
			st, err := eng.Submit(engine.Request{ID: fmt.Sprintf("dec-%d-%d", bi, i), Prompt: Prompt(64, 100+bi*100+i),
				Params: engine.SamplingParams{MaxTokens: decode, IgnoreEOS: true}})
			if err != nil {
				return nil, err
			}
			streams = append(streams, st)
		}
		// Prefill phase: step until every request has its first token.
		for {
			eng.Step(ctx)
			if eng.Stats().Waiting == 0 && eng.Stats().GeneratedTokens > 0 {
				break
			}
		}
		startSteps, startTok := eng.Stats().Steps, eng.Stats().GeneratedTokens
		start := time.Now()
		for eng.Stats().Running > 0 {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			eng.Step(ctx)
		}
		el := time.Since(start)
		steps := eng.Stats().Steps - startSteps
		toks := eng.Stats().GeneratedTokens - startTok
		for _, st := range streams {
			if _, _, err := st.Collect(ctx); err != nil {
				return nil, err
			}
		}
		stepT := el.Seconds() / float64(steps)
		pt := DecodePoint{Batch: b, StepMillis: stepT * 1e3, OutputTokensPerSec: float64(toks) / el.Seconds(),
			WeightGBps: weightBytes / stepT / 1e9}
		pt.WeightGBpsOverMemcp = pt.WeightGBps / res.MemcpyGBps
		pt.GFLOPS = float64(toks) * m.FLOPsPerToken(64+decode/2) / el.Seconds() / 1e9
		res.Decode = append(res.Decode, pt)
	}
	// The machine is shared: take the better of two kernel measurements
	// (before and after) as the limit.
	res.KernelGFLOPS = max(res.KernelGFLOPS, model.KernelFLOPS(0, time.Second)/1e9)
	res.PrefillOverKernel = res.PrefillGFLOPS / res.KernelGFLOPS
	for i := range res.Decode {
		res.Decode[i].GFLOPSOverKernel = res.Decode[i].GFLOPS / res.KernelGFLOPS
	}
	return res, nil
}
