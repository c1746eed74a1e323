package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	benchstore "github.com/kvcache-go/mooncake/internal/bench/store"
)

// newBenchStoreDurableCmd measures what durable metadata costs and what it
// buys: put throughput with --durable-metadata on vs off (two pools in this
// process, rounds alternated, median), and the time a restarted master takes
// to learn a pool's objects back from the nodes (internal/bench/store; the
// disk tier: store-disk).
func newBenchStoreDurableCmd() *cobra.Command {
	var (
		sizesFlag, clientsFlag, transport string
		rounds, objects                   int
		duration                          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "store-durable",
		Short: "Store put throughput with durable metadata on vs off, and master restart recovery time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var sizes, clients []int
			for _, s := range strings.Split(sizesFlag, ",") {
				n, err := parseSize(s)
				if err != nil || n == 0 {
					return &ExitError{Code: 2, Err: fmt.Errorf("--sizes: bad size %q", s)}
				}
				sizes = append(sizes, int(n))
			}
			for _, s := range strings.Split(clientsFlag, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 1 || n > 64 {
					return &ExitError{Code: 2, Err: fmt.Errorf("--clients: bad count %q", s)}
				}
				clients = append(clients, n)
			}
			res, err := benchstore.RunDurable(cmd.Context(), benchstore.DurableConfig{Sizes: sizes, Clients: clients,
				Rounds: rounds, Duration: duration, Objects: objects, Transport: transport})
			if err != nil {
				return err
			}
			printBenchStoreDurable(cmd.OutOrStdout(), res, rounds, duration)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizesFlag, "sizes", "4KiB,64KiB,1MiB", "value sizes")
	f.StringVar(&clientsFlag, "clients", "1,4", "concurrent clients")
	f.IntVar(&rounds, "rounds", 3, "rounds per phase, alternating on and off (median reported)")
	f.DurationVar(&duration, "duration", 500*time.Millisecond, "length of one phase")
	f.IntVar(&objects, "objects", 20000, "objects in the pool for the restart recovery measurement")
	f.StringVar(&transport, "transport", "auto", "transfer transport: auto, tcp, shm")
	return cmd
}

func printBenchStoreDurable(out io.Writer, res *benchstore.DurableResult, rounds int, d time.Duration) {
	fmt.Fprintf(out, "put (upsert of a key set filling a quarter of a 2 x %s pool), %d rounds x %v alternating, median\n", formatSize(res.SegmentSize), rounds, d)
	fmt.Fprintf(out, "%-8s %-7s %-12s %-12s %-8s %-10s %-10s\n", "size", "clients", "off GB/s", "on GB/s", "on/off", "off p50", "on p50")
	for _, r := range res.Put {
		if r.On.Errors+r.Off.Errors > 0 {
			fmt.Fprintf(out, "  errors: off %d (%v) on %d (%v)\n", r.Off.Errors, r.Off.FirstErr, r.On.Errors, r.On.FirstErr)
		}
		fmt.Fprintf(out, "%-8s %-7d %-12.3f %-12.3f %-8.2f %-10s %-10s\n", formatSize(uint64(r.Size)), r.Clients, r.Off.GBps(), r.On.GBps(),
			r.On.GBps()/r.Off.GBps(), fmtDur(r.Off.P50), fmtDur(r.On.P50))
	}
	fmt.Fprintf(out, "master restart: %d of %d objects (2 x %s segments scanned) back in %v (nodes ping every 50ms)\n",
		res.RestoreGot, res.RestoreWant, formatSize(res.SegmentSize), res.RestoreTook.Round(time.Millisecond))
}
