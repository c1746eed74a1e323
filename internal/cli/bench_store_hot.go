package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	benchstore "github.com/kvcache-go/mooncake/internal/bench/store"
)

// benchHotCacheFlags are the flags of `mooncake bench store --hot-cache`.
type benchHotCacheFlags struct {
	on            bool
	keys          int
	zipf          float64
	cacheSize     string
	overwriteRate float64
}

func (h *benchHotCacheFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&h.on, "hot-cache", false, "measure instead the client hot cache: Zipf-distributed get-into of --hot-keys keys per size by readers with the hot cache off and on (p50/p99 and ops/s ratios, hit ratio); sizes default to 4KiB,64KiB,1MiB and the transport to tcp (the nodes stand for remote machines)")
	f.IntVar(&h.keys, "hot-keys", 256, "--hot-cache: keys of each size (Zipf ranks)")
	f.Float64Var(&h.zipf, "hot-zipf", 1.1, "--hot-cache: Zipf exponent (> 1)")
	f.StringVar(&h.cacheSize, "hot-cache-size", "32MiB", "--hot-cache: each reader's hot cache size (MC_STORE_LOCAL_HOT_CACHE_SIZE)")
	f.Float64Var(&h.overwriteRate, "hot-overwrite-rate", 0, "--hot-cache: upserts per second of Zipf-drawn keys by a writer during the phases")
}

func runBenchStoreHotCache(ctx context.Context, out io.Writer, h benchHotCacheFlags, sizes, clients []int, rounds int, d time.Duration, transport string) error {
	size, err := parseSize(h.cacheSize)
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("--hot-cache-size: %w", err)}
	}
	cfg := benchstore.HotCacheConfig{Sizes: sizes, Clients: clients, Keys: h.keys, Zipf: h.zipf, CacheSize: size,
		OverwriteRate: h.overwriteRate, Rounds: rounds, Duration: d, Transport: transport}
	if err := cfg.Validate(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	res, err := benchstore.RunHotCache(ctx, cfg)
	if err != nil {
		return err
	}
	printBenchStoreHotCache(out, res)
	return nil
}

func printBenchStoreHotCache(out io.Writer, res *benchstore.HotCacheResult) {
	c := res.Config
	fmt.Fprintf(out, "hot cache: Zipf(s=%.2f) get-into over %d keys per size, cache %s per reader, transport %s, %d round(s) of %v, overwrites %.0f/s\n",
		c.Zipf, c.Keys, formatSize(c.CacheSize), c.Transport, c.Rounds, c.Duration, c.OverwriteRate)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "size\tclients\tops/s off\tops/s on\tratio\tp50 off\tp50 on\tratio\tp99 off\tp99 on\tratio\thit ratio\tfills\tmid-overwrite\terrors\t")
	ratio := func(a, b float64) float64 {
		if a == 0 {
			return 0
		}
		return b / a
	}
	for _, r := range res.Rows {
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%.0f\t%.2fx\t%s\t%s\t%.2fx\t%s\t%s\t%.2fx\t%.3f\t%.3f\t%d/%d\t%d\t\n", formatSize(uint64(r.Size)), r.Clients,
			r.Off.OpsPerSec(), r.On.OpsPerSec(), ratio(r.Off.OpsPerSec(), r.On.OpsPerSec()),
			fmtDur(r.Off.P50), fmtDur(r.On.P50), ratio(float64(r.Off.P50), float64(r.On.P50)),
			fmtDur(r.Off.P99), fmtDur(r.On.P99), ratio(float64(r.Off.P99), float64(r.On.P99)), r.HitRatio, r.Fills, r.NotFoundOff, r.NotFoundOn, r.Off.Errors+r.On.Errors)
	}
	w.Flush()
	for _, r := range res.Rows {
		for _, x := range []benchstore.Row{r.Off, r.On} {
			if x.FirstErr != nil {
				fmt.Fprintf(out, "first error of %s x%d: %v\n", formatSize(uint64(r.Size)), r.Clients, x.FirstErr)
			}
		}
	}
	fmt.Fprintln(out, "(ratios: on over off; p50/p99 ratios below 1 mean faster gets with the cache. Every get asks the master; a hit copies from local memory instead of reading the node.\n"+
		" fills: values taken into the caches per get; mid-overwrite: gets (off/on) that found their key hidden by an upsert in progress, not errors)")
}
