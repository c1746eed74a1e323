package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/bench/conductortrace"
	benchtrace "github.com/kvcache-go/mooncake/internal/bench/trace"
	"github.com/kvcache-go/mooncake/internal/tracesim"
)

type benchTraceFlags struct {
	trace      string
	limit      int
	capacities string
	asJSON     bool
	conductor  bool // also route through a real conductor service
	slo        time.Duration
	bandwidth  float64 // GB/s
	instPolicy string
	synthetic  string // "agent": replay a generated trace instead of a file
	seed       uint64
	cfg        tracesim.RouteConfig
}

// newBenchTraceCmd is `mooncake bench trace`: replays a Mooncake trace
// through cache eviction policies (one global pool) and prefill routers
// (per-instance caches), next to the paper's Table 1.
func newBenchTraceCmd() *cobra.Command {
	f := benchTraceFlags{cfg: tracesim.DefaultRouteConfig()}
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Trace-driven KV cache policy hit rates and KV-aware routing TTFT (simulation)",
		Long: `Replays a Mooncake JSONL trace (timestamp, input_length, output_length, hash_ids).

Cache policies: one global pool of --capacities blocks (512 tokens each); LRU, LFU,
LengthAware, TailFirst (tails of block chains before their heads) and Retention (chains kept
longer the more turns they had) hit rates, as ratios to the ideal (unlimited) hit ratio
computed directly from the trace and to LRU at the same capacity, next to the paper's Table 1
(measured on the arXiv trace). Belady's offline optimum (evict the block whose next use is
farthest; its own replay) is printed per capacity, and every policy's share of the gap
between LRU and it ("of gap": 0 = LRU, 1 = the optimum). The class ceiling (also offline:
the best a policy can do that knows a block only by its request's turn, its comebacks, its
request's new blocks, its depth, whether it is the prompt's last block, and its age, with
each class's statistics known in advance)
is printed per capacity as well.

Routing: --instances prefill instances with a cache of --capacity blocks each (--instance-policy);
round-robin, least-loaded, cache-aware and Mooncake's conductor; TTFT from the prefill cost
model, share of requests within --slo, and early rejections with --reject.
See internal/tracesim's package doc for every definition.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchTrace(cmd.OutOrStdout(), f)
		},
	}
	d := tracesim.DefaultRouteConfig()
	fl := cmd.Flags()
	fl.StringVar(&f.trace, "trace", "", "trace file (default: "+benchtrace.DefaultTraceRel+" relative to the repository root)")
	fl.IntVar(&f.limit, "limit", 0, "replay only the first N requests of the file (0: all)")
	fl.StringVar(&f.synthetic, "synthetic", "", "replay a generated trace instead of a file: agent (tool-agent tasks on shared tool prompts, tracesim.DefaultAgentShape)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the --synthetic trace")
	fl.StringVar(&f.capacities, "capacities", "inf,100000,50000,30000,20000,10000,5000,1000", "global pool sizes in blocks for the cache policy table")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object per result row")
	fl.BoolVar(&f.conductor, "conductor", false, "also run cache-aware and conductor fed by a real `mooncake conductor`: the instances publish KV events over ZMQ, the router queries it over HTTP (rows \"(conductor over HTTP)\"; their hit rates equal the \"(kv events)\" rows')")
	fl.IntVar(&f.cfg.Instances, "instances", d.Instances, "prefill instances for the routing simulation")
	fl.IntVar(&f.cfg.CapacityBlocks, "capacity", d.CapacityBlocks, "cache per prefill instance in blocks (0: unlimited)")
	fl.StringVar(&f.instPolicy, "instance-policy", d.InstancePolicy.String(), "eviction policy of each prefill instance's cache: lru, lfu, length-aware, tail-first or retention")
	fl.DurationVar(&f.slo, "slo", time.Duration(d.SLOSeconds*float64(time.Second)), "TTFT SLO")
	fl.BoolVar(&f.cfg.Reject, "reject", false, "reject a request early when its TTFT estimate exceeds --slo")
	fl.Float64Var(&f.bandwidth, "bandwidth", d.BandwidthBytesPerSec/1e9, "KV transfer bandwidth between prefill instances, GB/s")
	fl.Float64Var(&f.cfg.KVBytesPerToken, "kv-bytes-per-token", d.KVBytesPerToken, "KV cache bytes per token (default: LLaMA-70B-sized, 80 layers x 8 KV heads x 128 x K,V x fp16)")
	fl.IntVar(&f.cfg.BalanceThresholdBlocks, "balance-threshold", d.BalanceThresholdBlocks, "conductor pulls the best prefix when it beats the local one by more than this many blocks")
	fl.Float64Var(&f.cfg.Cost.Fixed, "prefill-fixed", d.Cost.Fixed, "prefill cost model: seconds per request")
	fl.Float64Var(&f.cfg.Cost.PerToken, "prefill-per-token", d.Cost.PerToken, "prefill cost model: seconds per uncached token")
	fl.Float64Var(&f.cfg.Cost.PerTokenPair, "prefill-per-token-pair", d.Cost.PerTokenPair, "prefill cost model: seconds per (new token, attended position) pair")
	return cmd
}

func runBenchTrace(out io.Writer, f benchTraceFlags) error {
	usage := func(err error) error { return &ExitError{Code: 2, Err: err} }
	if f.limit < 0 {
		return usage(fmt.Errorf("--limit %d < 0", f.limit))
	}
	caps, err := benchtrace.ParseCapacities(f.capacities)
	if err != nil {
		return usage(err)
	}
	cfg := f.cfg
	if cfg.InstancePolicy, err = tracesim.ParsePolicy(f.instPolicy); err != nil {
		return usage(fmt.Errorf("--instance-policy: %w", err))
	}
	cfg.SLOSeconds = f.slo.Seconds()
	cfg.BandwidthBytesPerSec = f.bandwidth * 1e9
	if err := cfg.Validate(); err != nil {
		return usage(err)
	}
	var tr tracesim.Trace
	var path string
	switch f.synthetic {
	case "":
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		if path, err = benchtrace.FindTrace(f.trace, wd); err != nil {
			return usage(err)
		}
		file, err := os.Open(path)
		if err != nil {
			return usage(fmt.Errorf("--trace: %w", err))
		}
		defer file.Close()
		if tr, err = tracesim.ReadAll(file, f.limit); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	case "agent":
		if f.trace != "" {
			return usage(errors.New("--synthetic and --trace exclude each other"))
		}
		tr.Requests = tracesim.GenerateAgent(tracesim.DefaultAgentShape(), f.seed)
		if f.limit > 0 && f.limit < len(tr.Requests) {
			tr.Requests = tr.Requests[:f.limit]
		}
		tr.Stats.Requests = len(tr.Requests)
		path = fmt.Sprintf("synthetic agent trace (seed %d)", f.seed)
	default:
		return usage(fmt.Errorf("--synthetic %q: want agent", f.synthetic))
	}
	res, err := benchtrace.Run(tr.Requests, caps, cfg)
	if errors.Is(err, benchtrace.ErrNoRequests) {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err != nil {
		return usage(err)
	}
	if f.conductor {
		for _, rt := range []tracesim.Router{tracesim.CacheAware, tracesim.Conductor} {
			feed, err := conductortrace.New(cfg.Instances)
			if err != nil {
				return err
			}
			rcfg := cfg
			rcfg.Feed = feed
			rr, err := tracesim.SimulateRouting(tr.Requests, rt, rcfg)
			feed.Close()
			if err != nil {
				return err
			}
			res.Route = append(res.Route, rr)
			res.RouteNames = append(res.RouteNames, rt.String()+" (conductor over HTTP)")
		}
	}
	ideal := res.IdealHitRate
	rows := []map[string]any{{
		"kind": "trace", "path": path, "requests": res.Requests, "blocks": res.Blocks, "distinct_blocks": res.DistinctBlocks,
		"length_mismatch": tr.Stats.LengthMismatch, "out_of_order": tr.Stats.OutOfOrder,
		"ideal_hits": res.IdealHits, "ideal_hit_rate": ideal,
	}}
	lru := map[int]float64{} // capacity -> LRU hit rate, for "vs LRU"
	for _, r := range res.Cache {
		if r.Policy == tracesim.LRU {
			lru[r.Capacity] = r.HitRate()
		}
	}
	opt := map[int]float64{} // capacity -> Belady's hit rate, for "of gap"
	for _, r := range res.Optimum {
		opt[r.Capacity] = r.HitRate()
	}
	for _, r := range res.Cache {
		row := map[string]any{
			"kind": "cache", "policy": r.Policy.String(), "capacity": r.Capacity, "unlimited": r.Capacity == tracesim.Unlimited,
			"hits": r.Hits, "blocks": r.Blocks, "evictions": r.Evictions,
			"hit_rate": r.HitRate(), "ratio_to_ideal": benchtrace.Ratio(r.HitRate(), ideal),
			"ratio_to_lru":     benchtrace.Ratio(r.HitRate(), lru[r.Capacity]),
			"optimum_hit_rate": opt[r.Capacity], "share_of_gap": benchtrace.GapShare(r.HitRate(), lru[r.Capacity], opt[r.Capacity]),
		}
		if v, ok := tracesim.PaperHitRate(r.Policy, r.Capacity); ok {
			row["paper_arxiv_hit_rate"] = v
		}
		rows = append(rows, row)
	}
	for _, r := range res.Optimum {
		rows = append(rows, map[string]any{
			"kind": "optimum", "policy": r.Policy.String(), "capacity": r.Capacity, "unlimited": r.Capacity == tracesim.Unlimited,
			"hits": r.Hits, "blocks": r.Blocks, "evictions": r.Evictions,
			"hit_rate": r.HitRate(), "ratio_to_ideal": benchtrace.Ratio(r.HitRate(), ideal),
			"ratio_to_lru": benchtrace.Ratio(r.HitRate(), lru[r.Capacity]),
		})
	}
	for _, r := range res.Ceiling {
		rows = append(rows, map[string]any{
			"kind": "ceiling", "policy": r.Policy.String(), "capacity": r.Capacity, "unlimited": r.Capacity == tracesim.Unlimited,
			"hits": r.Hits, "blocks": r.Blocks,
			"hit_rate": r.HitRate(), "ratio_to_ideal": benchtrace.Ratio(r.HitRate(), ideal),
			"ratio_to_lru":     benchtrace.Ratio(r.HitRate(), lru[r.Capacity]),
			"optimum_hit_rate": opt[r.Capacity], "share_of_gap": benchtrace.GapShare(r.HitRate(), lru[r.Capacity], opt[r.Capacity]),
		})
	}
	for i, r := range res.Route {
		rows = append(rows, map[string]any{
			"kind": "route", "router": res.RouteNames[i], "instances": cfg.Instances, "capacity": cfg.CapacityBlocks, "instance_policy": cfg.InstancePolicy.String(),
			"requests": r.Requests, "served": r.Served, "rejected": r.Rejected,
			"hit_rate": r.HitRate(), "pulled_rate": benchtrace.Ratio(float64(r.Pulled), float64(r.Blocks)),
			"mean_ttft_s": r.MeanTTFT, "p90_ttft_s": r.P90TTFT, "mean_isolated_prefill_s": r.MeanIsolated,
			"mean_ttft_vs_isolated": benchtrace.Ratio(r.MeanTTFT, r.MeanIsolated), "slo_s": cfg.SLOSeconds, "slo_fraction": r.SLOFraction(),
		})
	}
	cacheRes, routeRes := res.Cache, res.Route
	reqs, blocks, idealHits, distinct := res.Requests, res.Blocks, res.IdealHits, res.DistinctBlocks

	if f.asJSON {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, row := range rows {
			if err := enc.Encode(row); err != nil {
				return err
			}
		}
		_, err := out.Write(buf.Bytes())
		return err
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "trace %s: %d requests, %d blocks (%d distinct); warnings: %d length mismatch, %d out of order\n",
		path, reqs, blocks, distinct, tr.Stats.LengthMismatch, tr.Stats.OutOfOrder)
	fmt.Fprintf(&buf, "ideal hit ratio (unlimited pool, computed directly): %.4f (%d/%d); paper: 0.366 conversation, 0.51 arXiv trace\n\n",
		ideal, idealHits, blocks)
	fmt.Fprintln(&buf, "Cache policies, one global pool (capacity in 512-token blocks; paper = Table 1 on the arXiv trace):")
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\tcapacity\thit rate\tvs ideal\tvs LRU\toptimum\tof gap\tpaper (arXiv)\tevictions")
	for _, r := range cacheRes {
		paper := "-"
		if v, ok := tracesim.PaperHitRate(r.Policy, r.Capacity); ok {
			paper = fmt.Sprintf("%.2f", v)
		}
		gap := "-"
		if o := opt[r.Capacity]; o-lru[r.Capacity] > 1e-12 {
			gap = fmt.Sprintf("%+.3f", benchtrace.GapShare(r.HitRate(), lru[r.Capacity], o))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.4f\t%.3f\t%.3f\t%.4f\t%s\t%s\t%d\n", r.Policy, benchtrace.CapLabel(r.Capacity), r.HitRate(),
			benchtrace.Ratio(r.HitRate(), ideal), benchtrace.Ratio(r.HitRate(), lru[r.Capacity]), opt[r.Capacity], gap, paper, r.Evictions)
	}
	for _, r := range res.Optimum {
		fmt.Fprintf(tw, "%s (offline)\t%s\t%.4f\t%.3f\t%.3f\t%.4f\t%s\t%s\t%d\n", r.Policy, benchtrace.CapLabel(r.Capacity), r.HitRate(),
			benchtrace.Ratio(r.HitRate(), ideal), benchtrace.Ratio(r.HitRate(), lru[r.Capacity]), r.HitRate(), "1", "-", r.Evictions)
	}
	for _, r := range res.Ceiling {
		gap := "-"
		if o := opt[r.Capacity]; o-lru[r.Capacity] > 1e-12 {
			gap = fmt.Sprintf("%+.3f", benchtrace.GapShare(r.HitRate(), lru[r.Capacity], o))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.4f\t%.3f\t%.3f\t%.4f\t%s\t%s\t%s\n", r.Policy, benchtrace.CapLabel(r.Capacity), r.HitRate(),
			benchtrace.Ratio(r.HitRate(), ideal), benchtrace.Ratio(r.HitRate(), lru[r.Capacity]), opt[r.Capacity], gap, "-", "-")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Ceiling) > 0 {
		fmt.Fprintln(&buf, "ClassCeiling (offline): the best a policy that knows a block only by its request's turn, its comebacks, its request's new blocks, its depth, whether it is the last block, and its age can do, each class's statistics known in advance")
	}
	rej := "off"
	if cfg.Reject {
		rej = "on"
	}
	fmt.Fprintf(&buf, "\nRouting: %d prefill instances, %s %s blocks each, SLO %s, early rejection %s, %.3g GB/s, threshold %d blocks:\n",
		cfg.Instances, cfg.InstancePolicy, benchtrace.CapLabel(cfg.CapacityBlocks), f.slo, rej, f.bandwidth, cfg.BalanceThresholdBlocks)
	tw = tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "router\thit rate\tpulled\tmean TTFT s\tp90 TTFT s\tmean TTFT / isolated prefill\twithin SLO\trejected")
	for i, r := range routeRes {
		fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%.3f\t%.3f\t%.2f\t%.4f\t%d\n", res.RouteNames[i], r.HitRate(), benchtrace.Ratio(float64(r.Pulled), float64(r.Blocks)),
			r.MeanTTFT, r.P90TTFT, benchtrace.Ratio(r.MeanTTFT, r.MeanIsolated), r.SLOFraction(), r.Rejected)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = out.Write(buf.Bytes())
	return err
}
