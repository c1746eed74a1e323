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
	linkRate     string
	requests     int
	outTokens    int
	prefillTP    int
	decodeTP     int
	seed         uint64
	tpPairs      string
	tpModes      string
	warmup       int
}

// newBenchPDCmd is `mooncake bench pd`: colocated vs disaggregated TTFT and
// TPOT, KV bytes and transfer time per request, as ratios to the transfer
// engine's own throughput and to the prefill time, measured in one run.
// The --tp-pairs defaults of --model and --sizes.
const pairsModel, pairsSize = "wide-kv", "256"

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
The model is a built-in (tiny, tiny-tp, wide-kv, small) whose context is stretched to fit the largest prompt.
--prefill-tp and --decode-tp split the prefill and decode engines across tensor-parallel ranks
(each must divide the model's KV heads: tiny-tp has 4, wide-kv 8); the writes column is then the number of
transfer requests per KV transfer for that TP pair.

--tp-pairs P:Q,... measures only the KV transfer, for every listed TP pair in one run: one
cluster per pair and mode (--tp-modes: layer-wise, whole-request), then rounds that each time one
transfer of the engine's 1 MiB writes and send one request (of the first --sizes value) to every
cluster in turn, after --warmup rounds; it reports each pair's KV write GB/s (best and median
over the rounds), as ratios to the engine's 1 MiB writes and to the equal-TP pairs of the run.
With --tp-pairs, --model defaults to wide-kv (the KV geometry of one layer of Llama-3-8B: 8 KV
heads of 128, 32 KiB of KV per token over its 4 layers) and --sizes to 256: 8 MiB per transfer,
2 MiB per layer.

Two disaggregated clusters run side by side: one streams the KV layer by layer while the
prefill computes (the default), one transfers whole requests after it. --link-rate puts their
KV transfer on a link of that bandwidth (TCP transport, the transfer engine's token bucket),
e.g. 1Gbit, 100Mbit, 12.5MB, 2MiB; pick one where the transfer takes about as long as the
prefill to see how much of it the layer-wise stream hides: the report gives the layer-wise
TTFT as a ratio of the whole-request one and the share of the transfer time hidden.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchPD(cmd, bf) },
	}
	f := cmd.Flags()
	f.StringVar(&bf.model, "model", "small", "built-in model: tiny, tiny-tp, wide-kv or small (with --tp-pairs: wide-kv)")
	f.IntVar(&bf.prefillTP, "prefill-tp", 1, "tensor-parallel ranks of the prefill engine")
	f.IntVar(&bf.decodeTP, "decode-tp", 1, "tensor-parallel ranks of the decode engine")
	f.StringVar(&bf.sizes, "sizes", "512,2048,8192", "prompt sizes in tokens, comma separated (with --tp-pairs: 256)")
	f.IntVar(&bf.requests, "requests", 3, "requests per size and mode (medians are reported)")
	f.IntVar(&bf.outTokens, "output-tokens", 16, "tokens generated per request")
	f.Uint64Var(&bf.seed, "seed", 1, "weight seed")
	f.StringVar(&bf.tpPairs, "tp-pairs", "", "run only the KV transfer of these prefill:decode TP pairs, one cluster each, in one run (e.g. 1:1,2:2,4:4,1:2,2:1,1:4,4:1,2:4,4:2; the first --sizes value is the prompt size)")
	f.IntVar(&bf.warmup, "warmup", 0, "with --tp-pairs: requests per pair and mode sent before the measured ones")
	f.StringVar(&bf.tpModes, "tp-modes", "layer,whole", "with --tp-pairs: transfer modes, layer (layer-wise streaming) and/or whole (whole-request)")
	f.StringVar(&bf.linkRate, "link-rate", "", "bandwidth of the prefill->decode link (e.g. 1Gbit, 100Mbit, 12.5MB; empty: unlimited, auto transport)")
	return cmd
}

func runBenchPD(cmd *cobra.Command, bf benchPDFlags) error {
	out := cmd.OutOrStdout()
	if bf.tpPairs != "" {
		// The KV of a real model's prompt is megabytes per layer: by
		// default the pairs move wide-kv's (Llama-3-8B's per-layer KV
		// geometry), 8 MiB for a 256-token prompt.
		if !cmd.Flags().Changed("model") {
			bf.model = pairsModel
		}
		if !cmd.Flags().Changed("sizes") {
			bf.sizes = pairsSize
		}
		return runBenchPDPairs(cmd, bf)
	}
	cfg := benchpd.Config{Model: bf.model, Requests: bf.requests, OutputTokens: bf.outTokens, Seed: bf.seed,
		PrefillTP: bf.prefillTP, DecodeTP: bf.decodeTP}
	for _, s := range strings.Split(bf.sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			return &ExitError{Code: 2, Err: fmt.Errorf("--sizes: %q is not a token count >= 2", s)}
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	if bf.linkRate != "" {
		r, err := benchpd.ParseRate(bf.linkRate)
		if err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("--link-rate: %w", err)}
		}
		cfg.LinkRate = r
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
	if r.LinkRate > 0 {
		fmt.Fprintf(out, "P/D link: %.3g bytes/s (%.4g Gbit/s), TCP transport with the transfer engine's token bucket\n", r.LinkRate, r.LinkRate*8/1e9)
	}
	fmt.Fprintf(out, "%7s %-6s %10s %10s %12s %8s %10s %9s %9s %9s %10s %9s\n", "tokens", "mode", "TTFT ms", "TPOT ms", "KV bytes", "writes", "write ms", "GB/s", "xTE", "xTEsame", "write/pre", "tail ms")
	for _, sr := range r.Sizes {
		cm := sr.Coloc
		fmt.Fprintf(out, "%7d %-6s %10.1f %10.2f %12s %8s %10s %9s %9s %9s %10s %9s\n", sr.Tokens, "coloc", sr.PrefillMS, cm.TPOTMillis(), "-", "-", "-", "-", "-", "-", "-", "-")
		for _, row := range []struct {
			mode string
			s    benchpd.Sample
		}{{"whole", sr.Whole}, {"layer", sr.Disagg}} {
			dm := row.s
			gbps := 0.0
			if dm.WriteMS > 0 {
				gbps = dm.Bytes / (dm.WriteMS / 1e3) / 1e9
			}
			same, tail := "-", "-"
			if sr.SameGBps > 0 && row.mode == "layer" {
				same = fmt.Sprintf("%.2f", gbps/sr.SameGBps)
			}
			if dm.Layerwise {
				tail = fmt.Sprintf("%.2f", dm.TailMS)
			}
			fmt.Fprintf(out, "%7d %-6s %10.1f %10.2f %12.0f %8.0f %10.2f %9.3f %9.3f %9s %9.2f%% %9s\n", sr.Tokens, row.mode, float64(dm.TTFT)/1e6, dm.TPOTMillis(),
				dm.Bytes, dm.WriteReqs, dm.WriteMS, gbps, gbps/te.GBps, same, 100*dm.WriteMS/sr.PrefillMS, tail)
		}
	}
	fmt.Fprintln(out, "TTFT coloc = prefill time; whole = whole-request transfer after the prefill, layer = layer-wise streaming while it computes; write ms = prefill's KV write time to decode (layer: the sum of its writes); writes = transfer requests per KV transfer (one per layer, per chunk when streamed: a scatter-gather request of every rank's runs of blocks with equal TP, of every block's head range per overlapping rank pair with different TP); xTE = GB/s over the transfer engine's own (large writes, unlimited), xTEsame = over the engine's own with the same request size and count; write/pre = write time / colocated prefill time; tail ms = layer-wise writes after the prefill ended (not hidden)")
	fmt.Fprintf(out, "%7s %16s %14s %14s %14s\n", "tokens", "TTFT layer/whole", "TTFT saved ms", "hidden (tail)", "hidden (TTFT)")
	for _, sr := range r.Sizes {
		hidden, hiddenTTFT := "-", "-"
		if sr.Whole.WriteMS >= 0.05*sr.PrefillMS { // a transfer worth hiding
			tail, ttft := sr.Hidden()
			hidden, hiddenTTFT = fmt.Sprintf("%.1f%%", 100*tail), fmt.Sprintf("%.1f%%", 100*ttft)
		}
		fmt.Fprintf(out, "%7d %16.3f %14.1f %14s %14s\n", sr.Tokens, float64(sr.Disagg.TTFT)/float64(max(sr.Whole.TTFT, 1)),
			sr.TTFTSavedMS, hidden, hiddenTTFT)
	}
	fmt.Fprintln(out, "TTFT saved = median over request pairs of (whole TTFT - layer TTFT); hidden (tail) = 1 - layer-wise tail / whole-request write time: the share of the transfer hidden behind the prefill (aim >= 80%); hidden (TTFT) = TTFT saved / whole write time, the same seen by the client (noisier); '-' when the transfer is under 5% of the prefill")
	return nil
}

// runBenchPDPairs is `mooncake bench pd --tp-pairs`: the KV transfer of
// every TP pair in one run, as ratios to the transfer engine's 1 MiB
// writes and to the equal-TP pairs of the same run.
func runBenchPDPairs(cmd *cobra.Command, bf benchPDFlags) error {
	out := cmd.OutOrStdout()
	cfg := benchpd.PairsConfig{Model: bf.model, Requests: bf.requests, OutputTokens: bf.outTokens, Seed: bf.seed, Warmup: bf.warmup}
	n, err := strconv.Atoi(strings.TrimSpace(strings.Split(bf.sizes, ",")[0]))
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("--sizes: %q is not a token count", bf.sizes)}
	}
	cfg.Tokens = n
	for _, p := range strings.Split(bf.tpPairs, ",") {
		var a, b int
		if _, err := fmt.Sscanf(strings.TrimSpace(p), "%d:%d", &a, &b); err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("--tp-pairs: %q is not prefill:decode", p)}
		}
		cfg.Pairs = append(cfg.Pairs, [2]int{a, b})
	}
	for _, m := range strings.Split(bf.tpModes, ",") {
		cfg.Modes = append(cfg.Modes, strings.TrimSpace(m))
	}
	if err := cfg.Validate(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	r, err := benchpd.RunPairs(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "bench pd --tp-pairs: model %s (%d layers, %d KV heads x %d, %d KV bytes/token), %d-token prompts: %.2f MiB of KV per transfer; %d rounds after %d warm-up, every pair and the engine once per round\n",
		r.Model, r.Layers, r.KVHeads, r.HeadDim, r.KVBytesPerToken, r.Tokens, float64(r.KVBytesPerToken*r.Tokens)/(1<<20), r.Requests, bf.warmup)
	fmt.Fprintf(out, "transfer engine (%s, 1024 KiB writes over 64 MiB, one transfer per round): best %.2f GB/s, median %.2f GB/s\n", r.Engine.Transport, r.Engine.GBps, r.EngineMedian)
	if r.Shaped.Requests > 0 {
		fmt.Fprintf(out, "transfer engine, layer-shaped (%s, %d writes of %d KiB, one transfer each, their times summed, once per round): best %.2f GB/s, median %.2f GB/s\n",
			r.Engine.Transport, r.Shaped.Requests, r.Shaped.RequestBytes>>10, r.Shaped.GBps, r.Shaped.Median)
	}
	fmt.Fprintf(out, "%-8s %-6s %9s %7s %12s %10s %9s %6s %8s %7s %10s %6s %8s %12s\n", "P -> Q", "mode", "MiB/xfer", "writes", "bytes/write", "write ms", "best GB/s", "xTE", "xSameTP", "xShaped", "med GB/s", "xTE", "xSameTP", "us/write>TE")
	for _, p := range r.Pairs {
		shaped := "-"
		if p.Mode == "layer" && r.Shaped.GBps > 0 {
			shaped = fmt.Sprintf("%.2f", p.GBps/r.Shaped.GBps)
		}
		same, msame := "-", "-"
		if p.PrefillTP != p.DecodeTP {
			if g := r.SameTP(p.PrefillTP, p.DecodeTP, p.Mode, false); g > 0 {
				same = fmt.Sprintf("%.2f", p.GBps/g)
			}
			if g := r.SameTP(p.PrefillTP, p.DecodeTP, p.Mode, true); g > 0 {
				msame = fmt.Sprintf("%.2f", p.MedianGBps/g)
			}
		}
		fmt.Fprintf(out, "%-8s %-6s %9.2f %7.0f %12.0f %10.3f %9.3f %6.2f %8s %7s %10.3f %6.2f %8s %12s\n", fmt.Sprintf("%d -> %d", p.PrefillTP, p.DecodeTP), p.Mode,
			p.Bytes/(1<<20), p.WriteReqs, p.Bytes/max(p.WriteReqs, 1), p.WriteMS, p.GBps, p.GBps/r.Engine.GBps, same, shaped, p.MedianGBps, p.MedianGBps/r.EngineMedian, msame,
			fmt.Sprintf("%.1f", float64(r.ExtraPerWrite(p).Nanoseconds())/1e3))
	}
	fmt.Fprintln(out, "MiB/xfer = KV bytes of one transfer (the prompt's blocks in every layer); writes = transfer requests per KV transfer; write ms = median (plan and write; layer: the sum over its writes); best / med GB/s = KV bytes / prefill's write time (layer: the sum of its writes), the best and the median over the rounds; xTE = over the transfer engine's 1 MiB writes (best over best, median over median); xSameTP = over the mean of the equal-TP pairs P -> P and Q -> Q of the same mode in this run; xShaped (layer) = over the engine's layer-shaped writes (best over best): what is left is the cost of writing while the prefill computes; us/write>TE = how much longer each write took (best round) than its bytes at the engine's best 1 MiB rate: the transfer's cost per request beyond its bytes")
	return nil
}
