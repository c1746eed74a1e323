package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	benchserve "github.com/kvcache-go/mooncake/internal/bench/serve"
)

func newBenchServeCmd() *cobra.Command {
	var (
		modelName, batches string
		promptLen, decode  int
		seed               uint64
		asJSON             bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Reference engine: prefill and decode throughput, TTFT cold vs prefix hit",
		Long: `Runs the reference engine in process (no HTTP) and reports: prompt tokens/s and the
time to first token of a --prompt-len prompt cold and again with a full prefix-cache hit; the
decode step time and output tokens/s at each batch size; the KV bytes per token. Limits
measured in the same run: the matmul kernel's GFLOP/s on all cores and single-thread memcpy
GB/s; prefill is reported as a ratio to the kernel rate, decode's weight reads to memcpy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var bs []int
			for _, s := range strings.Split(batches, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n <= 0 {
					return &ExitError{Code: 2, Err: fmt.Errorf("--batches: bad batch size %q", s)}
				}
				bs = append(bs, n)
			}
			m, _, err := loadModel(modelName, seed)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			if promptLen < 2 || promptLen+2 > m.Config.MaxPositionEmbeddings || decode < 2 {
				return &ExitError{Code: 2, Err: fmt.Errorf("--prompt-len must be in [2, %d) and --decode-tokens >= 2", m.Config.MaxPositionEmbeddings-2)}
			}
			res, err := benchserve.Run(cmd.Context(), m, promptLen, decode, bs)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			printBenchServe(cmd.OutOrStdout(), res)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelName, "model", "small", "tiny, small or a model directory")
	f.Uint64Var(&seed, "seed", 1, "weight seed of a built-in model")
	f.IntVar(&promptLen, "prompt-len", 2048, "prompt length for the prefill and TTFT figures")
	f.IntVar(&decode, "decode-tokens", 32, "tokens generated per request in the decode figures")
	f.StringVar(&batches, "batches", "1,4,16", "decode batch sizes")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printBenchServe(w io.Writer, r *benchserve.Result) {
	fmt.Fprintf(w, "model %s: %.2fM params, %d cores, KV %d bytes/token\n", r.Model, float64(r.Params)/1e6, r.Cores, r.KVBytesPerToken)
	fmt.Fprintf(w, "limits (same run, best of two): matmul kernel %.2f GFLOP/s on all cores, memcpy %.2f GB/s (1 thread)\n", r.KernelGFLOPS, r.MemcpyGBps)
	fmt.Fprintf(w, "prefill %d tokens: %.0f prompt tok/s, %.2f GFLOP/s = %.2f x kernel\n", r.PromptLen, r.PromptTokensPerSecond, r.PrefillGFLOPS, r.PrefillOverKernel)
	fmt.Fprintf(w, "TTFT %d-token prompt: cold %.3fs, full prefix-cache hit %.4fs -> %.1fx faster\n", r.PromptLen, r.TTFTColdSeconds, r.TTFTHitSeconds, r.TTFTSpeedup)
	fmt.Fprintf(w, "%-6s %10s %14s %16s %16s\n", "batch", "step ms", "output tok/s", "weights/memcpy", "GFLOP/s/kernel")
	for _, d := range r.Decode {
		fmt.Fprintf(w, "%-6d %10.2f %14.0f %16.2f %16.2f\n", d.Batch, d.StepMillis, d.OutputTokensPerSec, d.WeightGBpsOverMemcp, d.GFLOPSOverKernel)
	}
}
