package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/bench/soak"
)

// newBenchSoakCmd is `mooncake bench soak`: a mixed P/D + store load on a
// multi-host test bed of network namespaces for --duration.
func newBenchSoakCmd() *cobra.Command {
	var (
		cfg     soak.Config
		asJSON  bool
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Mixed P/D + store load on a multi-host test bed (network namespaces, real processes) for --duration",
		Long: `Makes 6 hosts (network namespaces on a bridge, 10.250.N.0/24; needs root, ip, nft, tc),
starts a master, 3 storage nodes, 2 prefill and 2 decode engines (tiny model) and a proxy as
processes of this binary, and runs --workers streamed completions through the proxy and
--store-writers store writers/readers for --duration. One report row per --interval: requests,
errors by kind, p50/p99 TTFT and TPOT, store put/get p50/p99, RSS of every process. After the
load: every acknowledged put is read back, and the engines must hold no KV block.
Exit status 1 when any error, bad read or leaked block was seen.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Duration <= 0 || cfg.Interval < 0 || cfg.Workers < 1 || cfg.StoreWriters < 1 || cfg.StoreValue < 64 {
				return &ExitError{Code: 2, Err: fmt.Errorf("bench soak: want --duration > 0, --interval >= 0, --workers >= 1, --store-writers >= 1, --store-value >= 64")}
			}
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Binary = bin
			if verbose {
				cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelDebug}))
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				fmt.Fprintln(out, "interval\tcompletions\tputs\tgets\terrors\tTTFT p50/p99\tTPOT p50/p99\tput p50/p99\tget p50/p99\tRSS total")
				cfg.OnInterval = func(iv soak.Interval) { printSoakInterval(out, iv) }
			}
			rep, err := soak.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printSoakReport(out, rep)
			}
			if rep.Errors() > 0 || rep.Leaked != "" {
				return &ExitError{Code: 1, Err: fmt.Errorf("soak: %d errors, leaked: %q", rep.Errors(), rep.Leaked)}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&cfg.Duration, "duration", 5*time.Minute, "how long the load runs")
	fl.DurationVar(&cfg.Interval, "interval", 0, "one report row per interval (default duration/10, at least 5s)")
	fl.IntVar(&cfg.Workers, "workers", 4, "concurrent streamed completions")
	fl.IntVar(&cfg.StoreWriters, "store-writers", 2, "concurrent store writers (each reads back what it wrote)")
	fl.IntVar(&cfg.StoreValue, "store-value", 64<<10, "store value size in bytes")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fl.BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	return cmd
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

func printSoakInterval(out io.Writer, iv soak.Interval) {
	var total int64
	for _, v := range iv.RSS {
		total += v
	}
	errs := 0
	for _, v := range iv.Errors {
		errs += v
	}
	fmt.Fprintf(out, "%s-%s\t%d\t%d\t%d\t%d\t%s/%s ms\t%s/%s ms\t%s/%s ms\t%s/%s ms\t%.1f MiB\n",
		iv.Start.Round(time.Second), iv.End.Round(time.Second), iv.Ops["completion"], iv.Ops["put"], iv.Ops["get"], errs,
		ms(iv.TTFT.P50), ms(iv.TTFT.P99), ms(iv.TPOT.P50), ms(iv.TPOT.P99), ms(iv.Put.P50), ms(iv.Put.P99), ms(iv.Get.P50), ms(iv.Get.P99),
		float64(total)/(1<<20))
}

func printSoakReport(out io.Writer, rep *soak.Report) {
	fmt.Fprintf(out, "\nsoak %s on %s: %s\n", rep.Duration.Round(time.Second), rep.Subnet, rep.Total.String())
	fmt.Fprintf(out, "acknowledged keys read back: %d, bad: %d\n", rep.Verified, rep.BadReads)
	if rep.Leaked != "" {
		fmt.Fprintf(out, "LEAK: %s\n", rep.Leaked)
	} else {
		fmt.Fprintln(out, "KV blocks in use after the load: 0 on every engine")
	}
	for _, e := range rep.Examples {
		fmt.Fprintf(out, "  e.g. %s\n", e)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	names := rep.Processes()
	fmt.Fprintf(tw, "\nRSS MiB\t%s\n", strings.Join(names, "\t"))
	for _, iv := range rep.Intervals {
		row := []string{iv.End.Round(time.Second).String()}
		for _, n := range names {
			row = append(row, fmt.Sprintf("%.1f", float64(iv.RSS[n])/(1<<20)))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	growth := make([]string, 0, len(rep.RSSGrowth))
	for _, n := range names {
		if g, ok := rep.RSSGrowth[n]; ok {
			growth = append(growth, fmt.Sprintf("%s x%.2f", n, g))
		}
	}
	sort.Strings(growth)
	fmt.Fprintf(tw, "growth (last/first)\t%s\n", strings.Join(growth, ", "))
	tw.Flush()
}
