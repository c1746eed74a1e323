package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	benchstore "github.com/kvcache-go/mooncake/internal/bench/store"
	"github.com/kvcache-go/mooncake/internal/disktier"
)

// newBenchStoreDiskCmd measures the disk tier against its own disk: the
// offload write rate next to a sequential write of as many files, and
// gets from the tier (batched and single, 1 and N clients) next to a
// sequential read of the tier's files, in the same rounds, with direct I/O
// on both sides (internal/bench/store RunDisk).
func newBenchStoreDiskCmd() *cobra.Command {
	var (
		dir, transport, sizeFlag, cpuProfile   string
		objects, clients, batch, rounds, lanes int
		duration                               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "store-disk",
		Short: "Disk tier offload writes and gets against the disk's own sequential write and read",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := parseSize(sizeFlag)
			if err != nil || size == 0 || size > 64<<20 {
				return &ExitError{Code: 2, Err: fmt.Errorf("--size: bad size %q", sizeFlag)}
			}
			if objects < 1 || clients < 1 || clients > 64 || batch < 1 || rounds < 1 {
				return &ExitError{Code: 2, Err: fmt.Errorf("--objects, --clients, --batch and --rounds must be positive (clients at most 64)")}
			}
			stop, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stop()
			res, err := benchstore.RunDisk(cmd.Context(), benchstore.DiskConfig{Dir: dir, Size: int(size), Objects: objects, Clients: clients,
				Batch: batch, Rounds: rounds, Duration: duration, Transport: transport, Lanes: lanes})
			if err != nil {
				return err
			}
			printBenchStoreDisk(cmd.OutOrStdout(), res, batch, rounds, duration)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory on the disk to measure (default: the temp dir)")
	f.StringVar(&sizeFlag, "size", "1MiB", "value size")
	f.IntVar(&objects, "objects", 256, "values offloaded to the disk tier")
	f.IntVar(&clients, "clients", 4, "the larger client count (rows: 1 and this)")
	f.IntVar(&batch, "batch", 16, "keys per batch get")
	f.IntVar(&rounds, "rounds", 3, "rounds per row (median reported)")
	f.DurationVar(&duration, "duration", time.Second, "length of one phase")
	f.StringVar(&transport, "transport", "auto", "transfer transport: auto, tcp, shm")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (master, node and clients: one process) to this file")
	f.IntVar(&lanes, "lanes", 0, "TCP bulk lanes of the clients' engines (0: the engine's default, GOMAXPROCS-1 up to 4)")
	return cmd
}

func printBenchStoreDisk(out io.Writer, res *benchstore.DiskResult, batch, rounds int, d time.Duration) {
	io := "direct I/O (O_DIRECT) on both sides"
	if !res.Direct {
		io = "buffered I/O, files dropped from the page cache before every phase"
	}
	fmt.Fprintf(out, "disk tier: %d x %s values offloaded, %s; %d rounds x %v, median\n", res.Objects, formatSize(uint64(res.Size)), io, rounds, d)
	fmt.Fprintf(out, "references: the disk's sequential write and read of as many files, whole files, %d writes / %d reads at once (the tier's queue depth; qd1: one at a time)\n",
		disktier.WriteDepth, disktier.ReadDepth)
	fmt.Fprintf(out, "offload write %.3f GB/s, disk sequential write %.3f GB/s (qd1 %.3f): %.2fx\n", res.OffloadGBps, res.SeqWriteGBps, res.SeqWrite1GBps,
		res.OffloadGBps/res.SeqWriteGBps)
	fmt.Fprintf(out, "%-8s %-16s %-16s %-16s %-16s %-10s %-10s %-18s %-10s %-16s %-10s\n", "clients", fmt.Sprintf("batch get (%d)", batch), "get", "disk seq. read",
		"seq. read qd1", "batch/seq", "get/seq", "memory batch get", "batch/mem", "memory get", "get/mem")
	for _, r := range res.Rows {
		fmt.Fprintf(out, "%-8d %-16s %-16s %-16s %-16s %-10.2f %-10.2f %-18s %-10.2f %-16s %-10.2f\n", r.Clients, fmt.Sprintf("%.3f GB/s", r.BatchGBps),
			fmt.Sprintf("%.3f GB/s", r.GetGBps), fmt.Sprintf("%.3f GB/s", r.SeqGBps), fmt.Sprintf("%.3f GB/s", r.Seq1GBps),
			r.BatchGBps/r.SeqGBps, r.GetGBps/r.SeqGBps, fmt.Sprintf("%.3f GB/s", r.MemGBps), r.BatchGBps/r.MemGBps,
			fmt.Sprintf("%.3f GB/s", r.MemGetGBps), r.GetGBps/r.MemGetGBps)
	}
	for _, r := range res.Rows {
		fmt.Fprintf(out, "tier, %d client(s): lanes waited for the disk on %.0f%% of batch-get slices (%v each), %.0f%% of get slices (%v each); reads ahead in the device %.1f / %.1f on average\n",
			r.Clients, 100*r.Batch.Waited, r.Batch.Wait.Round(time.Microsecond), 100*r.Get.Waited, r.Get.Wait.Round(time.Microsecond), r.Batch.InDevice, r.Get.InDevice)
	}
	fmt.Fprintf(out, "tier: %d of %d slices served from reads ahead (%d reads; %d slices read ahead unannounced, %d read and never asked for)\n",
		res.AheadHits, res.ReadCalls, res.AheadReads, res.Speculative, res.Dropped)
}
