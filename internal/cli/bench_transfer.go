package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	benchstore "github.com/kvcache-go/mooncake/internal/bench/store"
	"github.com/kvcache-go/mooncake/internal/grant"

	"github.com/spf13/cobra"

	benchtransfer "github.com/kvcache-go/mooncake/internal/bench/transfer"
)

// newBenchTransferCmd is `mooncake bench transfer`: the transfer engine
// benchmark (target + initiator), reported as a ratio to raw loopback TCP
// (tcp) or single-thread memcpy (shm, inproc) measured in the same run.
func newBenchTransferCmd() *cobra.Command {
	var (
		c                        benchtransfer.Config
		block, bufSize, mode, tg string
		asJSON, underLoad        bool
		grants                   string
		grantRounds              int
	)
	cmd := &cobra.Command{
		Use:   "transfer",
		Short: "Transfer engine throughput and latency (tcp, shm, inproc; host or GPU memory) vs. this machine's limit",
		Long: `Runs a target engine and an initiator. Without --target the bench starts its own
target (a second process for tcp and shm, re-executing this binary with --mode target).
--mode target prints "TARGET <segment> <addr> <len> <sink>" and serves until stdin closes
or the process is signalled; --mode initiator --target <segment> runs against it.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if c.BlockSize, err = benchtransfer.ParseSize(block); err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--block-size: %w", err)}
			}
			if underLoad && c.BufferSize < benchtransfer.LargeSize+c.BlockSize {
				c.BufferSize = benchtransfer.LargeSize + c.BlockSize
			}
			if bufSize != "" {
				if c.BufferSize, err = benchtransfer.ParseSize(bufSize); err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("--buffer-size: %w", err)}
				}
			}
			if err := c.Validate(); err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			if grants != "off" && grants != "on" && grants != "both" {
				return &ExitError{Code: 2, Err: fmt.Errorf("--grants %q: want off, on or both", grants)}
			}
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			switch mode {
			case "target":
				// Serve until stdin closes (the parent initiator ended) or a signal.
				return benchtransfer.ServeTarget(ctx, c, out, os.Stdin)
			case "initiator", "":
			default:
				return &ExitError{Code: 2, Err: fmt.Errorf("--mode %q: want target or initiator", mode)}
			}
			start := func(c benchtransfer.Config) (benchtransfer.TargetInfo, func(), error) {
				var info benchtransfer.TargetInfo
				switch {
				case tg != "":
					// Separate target: find its buffer through the handshake.
					info, err := benchtransfer.Discover(ctx, c, tg)
					return info, func() {}, err
				case c.Transport == "inproc":
					t, err := benchtransfer.StartTarget(ctx, c)
					if err != nil {
						return info, nil, err
					}
					info, _ = benchtransfer.ParseLine(t.Line())
					return info, func() { _ = t.Close() }, nil
				}
				exe, err := os.Executable()
				if err != nil {
					exe = os.Args[0]
				}
				args := []string{"bench", "transfer", "--mode", "target", "--transport", c.Transport,
					"--op", c.Op, "--block-size", strconv.Itoa(c.BlockSize), "--batch-size", strconv.Itoa(c.BatchSize),
					"--threads", strconv.Itoa(c.Threads), "--buffer-size", strconv.Itoa(max(c.BufferSize, c.Threads*c.BatchSize*c.BlockSize, 1<<20)),
					"--lanes", strconv.Itoa(c.Lanes), "--slice-size", strconv.Itoa(c.SliceSize)}
				if c.Checksum {
					args = append(args, "--checksum")
				}
				if c.Secret != "" {
					args = append(args, "--secret", c.Secret)
				}
				args = append(args, "--device", c.Device, "--target-device", c.TargetDevice, "--cuda-lib", c.CUDALib)
				if c.GrantKey != "" {
					args = append(args, "--grant-key", c.GrantKey)
				}
				return benchtransfer.SpawnTarget(ctx, exe, args)
			}
			if grants == "both" {
				if grantRounds < 1 {
					return &ExitError{Code: 2, Err: fmt.Errorf("--rounds %d: want at least 1", grantRounds)}
				}
				return benchTransferGrants(ctx, out, c, start, grantRounds, asJSON)
			}
			if grants == "on" && c.GrantKey == "" {
				c.GrantKey = grant.NewKeyHex()
			}
			info, stop, err := start(c)
			if err != nil {
				return err
			}
			defer stop()
			if underLoad {
				r, err := benchtransfer.SmallDuringLarge(ctx, c, info, c.BlockSize, c.Duration)
				if err != nil {
					return err
				}
				if asJSON {
					b, _ := json.Marshal(r)
					fmt.Fprintln(out, string(b))
				} else {
					fmt.Fprintln(out, r.String())
				}
				return nil
			}
			if !asJSON {
				c.Progress = cmd.ErrOrStderr()
				fmt.Fprintf(out, "bench transfer: %s %s, block %d, batch %d, threads %d, %s against %s\n",
					c.Transport, c.Op, c.BlockSize, c.BatchSize, c.Threads, c.Duration, info.Segment)
			}
			r, err := benchtransfer.RunInitiator(ctx, c, info)
			if err != nil {
				return err
			}
			if asJSON {
				b, _ := json.Marshal(r)
				fmt.Fprintln(out, string(b))
				return nil
			}
			fmt.Fprintln(out, r.String())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Transport, "transport", "tcp", "tcp, shm or inproc")
	f.StringVar(&c.Op, "op", "write", "read or write")
	f.StringVar(&block, "block-size", "1MiB", "bytes per request (4KiB, 1MiB, 65536)")
	f.IntVar(&c.BatchSize, "batch-size", 4, "requests per batch")
	f.BoolVar(&c.ScatterGather, "scatter-gather", false, "send each batch as one scatter-gather request of --batch-size extents (remote extents in reverse order, so none merge)")
	f.IntVar(&c.Threads, "threads", 2, "concurrent submitters")
	f.DurationVar(&c.Duration, "duration", 5e9, "measured time")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.StringVar(&mode, "mode", "", "target or initiator (default: both, target in a second process)")
	f.StringVar(&tg, "target", "", "target segment host:port (with --mode initiator)")
	f.StringVar(&bufSize, "buffer-size", "", "bytes registered per side (default threads*batch*block)")
	f.BoolVar(&c.Checksum, "checksum", false, "CRC32C per slice")
	f.StringVar(&c.Secret, "secret", "", "shared secret for the handshake")
	f.BoolVar(&underLoad, "small-during-large", false, "measure --block-size sync writes while a 64 MiB stream runs (latency under load)")
	f.IntVar(&c.SliceSize, "slice-size", 0, "TCP slice size in bytes (0: engine default)")
	f.IntVar(&c.Lanes, "lanes", 0, "TCP bulk lanes per peer (0: engine default)")
	f.StringVar(&c.Device, "device", "cpu", "initiator's buffer: cpu or cuda (GPU 0; the baseline is then pinned cuMemcpy)")
	f.StringVar(&c.TargetDevice, "target-device", "", "target's buffer: cpu or cuda (default: as --device)")
	f.StringVar(&c.CUDALib, "cuda-lib", os.Getenv("MOONCAKE_CUDA_LIB"), "CUDA driver library (default libcuda.so.1; $MOONCAKE_CUDA_LIB)")
	f.StringVar(&grants, "grants", "off", `data-path grants: "off", "on" (the target checks a grant per request, the initiator sends one per thread), or "both": rounds against a target without and one with grants, one right after the other (which goes first alternates), and the median of the rounds' paired ratios`)
	f.IntVar(&grantRounds, "rounds", 5, "with --grants both: rounds, each measuring both targets for --duration")
	f.StringVar(&c.GrantKey, "grant-key", "", "grant key in hex (the target of --grants on; made up when not given)")
	_ = f.MarkHidden("grant-key")
	return cmd
}

// benchTransferGrants runs the initiator against a target without grants
// and one with them, one right after the other in each of rounds rounds
// (which goes first alternates), and prints the median of the rounds'
// paired ratios (each round's on over off, GB/s), their quartiles, and
// each side's median round: pairing keeps a drift of the machine's other
// load out of the ratio.
func benchTransferGrants(ctx context.Context, out io.Writer, c benchtransfer.Config,
	start func(benchtransfer.Config) (benchtransfer.TargetInfo, func(), error), rounds int, asJSON bool) error {
	on := c
	on.GrantKey = grant.NewKeyHex()
	c.GrantKey = ""
	var res [2][]benchtransfer.Result
	cfgs := [2]benchtransfer.Config{c, on}
	var paired, p50 benchstore.Ratios
	for round := range rounds {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		var got [2]benchtransfer.Result
		for _, k := range order {
			cfg := cfgs[k]
			info, stop, err := start(cfg)
			if err != nil {
				return err
			}
			r, err := benchtransfer.RunInitiator(ctx, cfg, info)
			stop()
			if err != nil {
				return fmt.Errorf("round %d, grants %v: %w", round, k == 1, err)
			}
			got[k] = r
			res[k] = append(res[k], r)
		}
		if got[0].GBPerS > 0 {
			paired = append(paired, got[1].GBPerS/got[0].GBPerS)
		}
		if got[0].P50us > 0 {
			p50 = append(p50, got[1].P50us/got[0].P50us)
		}
	}
	med := func(rs []benchtransfer.Result) benchtransfer.Result {
		rs = slices.Clone(rs)
		slices.SortFunc(rs, func(a, b benchtransfer.Result) int { return cmp.Compare(a.GBPerS, b.GBPerS) })
		return rs[len(rs)/2]
	}
	off, with := med(res[0]), med(res[1])
	q1, q3 := paired.Quartiles()
	if asJSON {
		b, _ := json.Marshal(map[string]any{"off": off, "on": with, "ratio": paired.Median(), "quartiles": []float64{q1, q3},
			"medians_ratio": with.GBPerS / off.GBPerS, "p50_ratio": p50.Median(), "rounds": rounds})
		fmt.Fprintln(out, string(b))
		return nil
	}
	fmt.Fprintf(out, "grants off: %s\ngrants on:  %s\ngrants on vs off: GB/s %.3fx [%.3f-%.3f] (medians %.3fx), p50 %.2fx\n"+
		"(the median over the %d rounds of each round's ratio, on over off, of its two measurements, taken one right after the other;\n"+
		" quartiles in brackets; medians: the ratio of the two sides' median rounds, which the lines above show)\n",
		off, with, paired.Median(), q1, q3, with.GBPerS/off.GBPerS, p50.Median(), rounds)
	return nil
}
