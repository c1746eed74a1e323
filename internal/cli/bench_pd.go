package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	benchpd "github.com/kvcache-go/mooncake/internal/bench/pd"
)

type benchPDFlags struct {
	model, sizes string
	requests     int
	outTokens    int
	prefillTP    int
	decodeTP     int
	seed         uint64
}

// newBenchPDCmd is `mooncake bench pd`: colocated vs disaggregated TTFT and
// TPOT, KV bytes and transfer time per request, as ratios to the transfer
// engine's own throughput and to the prefill time, measured in one run.
func newBenchPDCmd() *cobra.Command {
	var bf benchPDFlags
	cmd := &cobra.Command{
		Use:   "pd",
		Short: "Prefill/decode disaggregation: colocated vs disaggregated TTFT/TPOT and KV transfer cost",
		Long: `For each prompt size, runs --requests greedy streaming requests against a colocated engine
and through a proxy + prefill + decode cluster (all in this process, on loopback), and reports
medians: time to first token, time per output token, KV bytes moved per request, the prefill's
KV write time and its GB/s as a ratio of the transfer engine's own throughput measured in the
same run (same transport, same process), and the write time as a share of the prefill time.
The model is a built-in (tiny, tiny-tp, small) whose context is stretched to fit the largest prompt.
--prefill-tp and --decode-tp split the prefill and decode engines across tensor-parallel ranks
(each must divide the model's KV heads: tiny-tp has 4); the writes column is then the number of
transfer requests per KV transfer for that TP pair.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchPD(cmd, bf) },
	}
	f := cmd.Flags()
	f.StringVar(&bf.model, "model", "small", "built-in model: tiny, tiny-tp or small")
	f.IntVar(&bf.prefillTP, "prefill-tp", 1, "tensor-parallel ranks of the prefill engine")
	f.IntVar(&bf.decodeTP, "decode-tp", 1, "tensor-parallel ranks of the decode engine")
	f.StringVar(&bf.sizes, "sizes", "512,2048,8192", "prompt sizes in tokens, comma separated")
	f.IntVar(&bf.requests, "requests", 3, "requests per size and mode (medians are reported)")
	f.IntVar(&bf.outTokens, "output-tokens", 16, "tokens generated per request")
	f.Uint64Var(&bf.seed, "seed", 1, "weight seed")
	return cmd
}

func runBenchPD(cmd *cobra.Command, bf benchPDFlags) error {
	out := cmd.OutOrStdout()
	cfg := benchpd.Config{Model: bf.model, Requests: bf.requests, OutputTokens: bf.outTokens, Seed: bf.seed,
		PrefillTP: bf.prefillTP, DecodeTP: bf.decodeTP}
	for _, s := range strings.Split(bf.sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			return &ExitError{Code: 2, Err: fmt.Errorf("--sizes: %q is not a token count >= 2", s)}
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	if err := cfg.Validate(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	r, err := benchpd.Run(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "bench pd: model %s (%d layers, %d KV heads x %d, %d KV bytes/token), %d requests per size, %d output tokens, prefill tp %d -> decode tp %d\n",
		r.Model, r.Layers, r.KVHeads, r.HeadDim, r.KVBytesPerToken, r.Requests, r.OutputTokens, r.PrefillTP, r.DecodeTP)
	te := r.Engine
	fmt.Fprintf(out, "transfer engine (%s, %d KiB writes over 64 MiB): %.2f GB/s; memcpy %.2f GB/s (engine = %.2f x memcpy)\n",
		te.Transport, te.RequestBytes>>10, te.GBps, te.MemcpyGBps, te.GBps/te.MemcpyGBps)
	fmt.Fprintf(out, "%7s %-6s %10s %10s %12s %8s %10s %9s %9s %9s %10s\n", "tokens", "mode", "TTFT ms", "TPOT ms", "KV bytes", "writes", "write ms", "GB/s", "xTE", "xTEsame", "write/pre")
	for _, sr := range r.Sizes {
		cm, dm := sr.Coloc, sr.Disagg
		fmt.Fprintf(out, "%7d %-6s %10.1f %10.2f %12s %8s %10s %9s %9s %9s %10s\n", sr.Tokens, "coloc", sr.PrefillMS, cm.TPOTMillis(), "-", "-", "-", "-", "-", "-", "-")
		fmt.Fprintf(out, "%7d %-6s %10.1f %10.2f %12.0f %8.0f %10.2f %9.2f %9.2f %9.2f %9.2f%%\n", sr.Tokens, "disagg", float64(dm.TTFT)/1e6, dm.TPOTMillis(),
			dm.Bytes, dm.WriteReqs, dm.WriteMS, sr.WriteGBps, sr.WriteGBps/te.GBps, sr.WriteGBps/max(sr.SameGBps, 1e-9), 100*dm.WriteMS/sr.PrefillMS)
	}
	fmt.Fprintln(out, "TTFT coloc = prefill time; write ms = prefill's KV write to decode (transfer engine); writes = transfer requests per KV transfer (one per run of consecutive blocks per layer and rank with equal TP; one per block per layer and overlapping rank pair with different TP); xTE = its GB/s over the transfer engine's own (large writes), xTEsame = over the engine's own with the same request size and count; write/pre = write time / colocated prefill time (aim < 10% at 2048 tokens)")
	return nil
}
