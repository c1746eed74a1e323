package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	benchstore "github.com/kvcache-go/mooncake/internal/bench/store"
)

// The rounds of --security and of --grants both, unless --rounds or
// --duration are given: many short ones (the same time in all as 5 and 3
// rounds of 500ms), their on/off figure the median of the rounds' paired
// ratios.
const (
	securityRounds     = 20
	securityDuration   = 125 * time.Millisecond
	grantsBothRounds   = 12
	grantsBothDuration = 125 * time.Millisecond
)

func newBenchStoreCmd() *cobra.Command {
	var (
		sizesFlag, clientsFlag, segSizeFlag, redisFlag, transport string
		servers, grants, opsFlag, device, cudaLib                 string
		cpuProfile                                                string
		nodes, rounds                                             int
		duration                                                  time.Duration
		security, clientProcs, isWorker                           bool
		features                                                  []string
		hot                                                       benchHotCacheFlags
		worker                                                    benchstore.WorkerConfig
	)
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Put/get throughput and latency of the store, next to Redis on loopback",
		Long: `Starts a master and storage nodes in this process (loopback, real transfer
engines; --servers process runs them as their own mooncake processes instead, as
redis-server is its own process, and --servers both measures both), then for each value size and client count runs a put phase and a get
phase of --duration each: ops/s, GB/s, p50/p99 latency. The same workload runs
against Debian's redis-server (started on a free loopback port when installed,
or --redis HOST:PORT) as the peer anchor, measured by Debian's redis-benchmark
(package redis-tools), and single-thread memcpy is measured as the machine's
limit. Last, it fills a fresh pool with mixed-size values until
the first eviction and reports the segment utilisation reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if isWorker {
				worker.Transport = transport
				return benchstore.RunWorker(cmd.Context(), worker, cmd.InOrStdin(), cmd.OutOrStdout())
			}
			var sizes []int
			for _, s := range strings.Split(sizesFlag, ",") {
				n, err := parseSize(s)
				if err != nil || n == 0 {
					return &ExitError{Code: 2, Err: fmt.Errorf("--sizes: bad size %q", s)}
				}
				sizes = append(sizes, int(n))
			}
			var clients []int
			for _, s := range strings.Split(clientsFlag, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 1 || n > 64 {
					return &ExitError{Code: 2, Err: fmt.Errorf("--clients: bad count %q", s)}
				}
				clients = append(clients, n)
			}
			if hot.on {
				if !cmd.Flags().Changed("sizes") {
					sizes = []int{4 << 10, 64 << 10, 1 << 20}
				}
				if !cmd.Flags().Changed("transport") {
					transport = "tcp"
				}
				return runBenchStoreHotCache(cmd.Context(), cmd.OutOrStdout(), hot, sizes, clients, rounds, duration, transport)
			}
			if security {
				// Many short rounds: the paired ratios' median is steadier
				// than a few long rounds' (the same time in all).
				if !cmd.Flags().Changed("rounds") {
					rounds = securityRounds
				}
				if !cmd.Flags().Changed("duration") {
					duration = securityDuration
				}
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
				res, err := benchstore.RunSecurity(cmd.Context(), benchstore.SecurityConfig{Sizes: sizes, Clients: clients,
					Rounds: rounds, Duration: duration, Transport: transport, Features: features})
				if err != nil {
					return err
				}
				printBenchStoreSecurity(cmd.OutOrStdout(), res)
				return nil
			}
			if grants == benchstore.GrantsBoth && !cmd.Flags().Changed("rounds") && !cmd.Flags().Changed("duration") {
				rounds, duration = grantsBothRounds, grantsBothDuration
			}
			seg, err := parseSize(segSizeFlag)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			cfg := benchstore.Config{Sizes: sizes, Clients: clients, SegmentSize: seg,
				Nodes: nodes, Duration: duration, Rounds: rounds, Redis: redisFlag, Transport: transport, Servers: servers, Grants: grants,
				Device: device, CUDALib: cudaLib, ClientProcs: clientProcs}
			if opsFlag != "" {
				cfg.Ops = strings.Split(opsFlag, ",")
			}
			if servers != benchstore.ServersInProcess {
				if cfg.Binary, err = os.Executable(); err != nil {
					return err
				}
			}
			if err := cfg.Validate(); err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			stop, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stop()
			if cpuProfile != "" && servers != benchstore.ServersInProcess {
				// The server and client processes profile themselves.
				if err := os.Setenv(cpuProfileEnv, cpuProfile); err != nil {
					return err
				}
				defer os.Unsetenv(cpuProfileEnv)
			}
			return runBenchStore(cmd.Context(), cmd.OutOrStdout(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizesFlag, "sizes", "4KiB,64KiB,1MiB,16MiB", "value sizes")
	f.StringVar(&clientsFlag, "clients", "1,8", "concurrent client counts")
	f.StringVar(&segSizeFlag, "segment-size", "512MiB", "segment size of each storage node")
	f.IntVar(&nodes, "nodes", 2, "storage nodes")
	f.StringVar(&device, "device", "cpu", "cuda adds the phases put-device and get-into-device (values from and into GPU memory)")
	f.StringVar(&cudaLib, "cuda-lib", os.Getenv("MOONCAKE_CUDA_LIB"), "CUDA driver library (default libcuda.so.1; $MOONCAKE_CUDA_LIB)")
	f.DurationVar(&duration, "duration", 500*time.Millisecond, "duration of each phase")
	f.IntVar(&rounds, "rounds", 3, "rounds per configuration, alternating the systems; the median is reported")
	f.StringVar(&redisFlag, "redis", "auto", `"auto" (start redis-server if installed), "off", or HOST:PORT of a running Redis; measured with redis-benchmark`)
	f.StringVar(&transport, "transport", "auto", "transfer transport of clients and nodes: auto, tcp, shm")
	f.StringSliceVar(&features, "features", nil, "with --security: the comparisons to run, comma-separated (tenants, grants, tls; default all)")
	f.BoolVar(&security, "security", false, "measure instead what tenants (a policy, tokens, namespaced keys, quotas) and data-path grants (both pools' transfers on TCP) cost against none, for put and get of each size and client count, and TLS on the master's port against plaintext for 4 KiB puts, over TCP (tls) and against the same-host socket (tls-vs-local) (pools side by side in this process; on/off: the median of the rounds' paired ratios; default --rounds 20 --duration 125ms)")
	f.StringVar(&servers, "servers", benchstore.ServersInProcess, `where the master and storage nodes run: "inproc" (in this process, rows "mooncake"), "process" (each its own mooncake process, as redis-server is its own; rows "mooncake-proc"), or "both"; the clients run in this process unless --client-procs`)
	f.StringVar(&opsFlag, "ops", "", "phases to run, comma-separated (put, batch-put, get, batch-get, get-into, exist; default all; put always runs)")
	f.BoolVar(&clientProcs, "client-procs", false, `with --servers process or both: run each client of the separate-process cluster as a process of its own (one client per process, as one engine worker per process is deployed; rows "mooncake-cproc")`)
	// The worker mode: one client process of --client-procs.
	f.BoolVar(&isWorker, "client-worker", false, "run as a client process of --client-procs")
	f.StringVar(&worker.Master, "master", "", "client worker: the master's address")
	f.IntVar(&worker.MaxSize, "max-size", 0, "client worker: the largest value size")
	for _, h := range []string{"client-worker", "master", "max-size"} {
		_ = f.MarkHidden(h)
	}
	hot.register(f)
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (with the servers in process: master, nodes and clients together; with --servers process each server and client process writes its own, FILE.ROLE-PID.pprof)")
	f.StringVar(&grants, "grants", benchstore.GrantsOff, `data-path grants of the in-process cluster: "off", "on" (rows "mooncake-grants": the master signs a grant per extent, the nodes check them; no shared memory to the nodes), or "both", alternated round by round, with their ratios printed (the median of the rounds' paired ratios; without --rounds and --duration, 12 rounds of 125ms)`)
	return cmd
}

// runBenchStore runs the store benchmark and prints its figures.
func runBenchStore(ctx context.Context, out io.Writer, cfg benchstore.Config) error {
	r, err := benchstore.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "machine limit: single-thread memcpy %.2f GB/s\n", r.MemcpyGBps)
	if r.RedisSkipped != nil {
		fmt.Fprintf(out, "redis: %v (skipped)\n", r.RedisSkipped)
	}
	printBenchStore(out, r)
	for _, u := range r.Utilisation {
		fmt.Fprintf(out, "segment utilisation before first eviction (mixed 4KiB-1MiB values, watermark %.2f): %.3f\n", u.Watermark, u.Used)
	}
	return nil
}

func printBenchStore(out io.Writer, res *benchstore.Result) {
	results, memcpy := res.Rows, res.MemcpyGBps
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "system\top\tsize\tclients\tops/s\tGB/s\tof memcpy\tp50\tp99\terrors\t")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%.0f\t%.3f\t%.3f\t%s\t%s\t%d\t\n", r.System, r.Op, formatSize(uint64(r.Size)), r.Clients,
			r.OpsPerSec(), r.GBps(), r.GBps()/memcpy, fmtDur(r.P50), fmtDur(r.P99), r.Errors)
	}
	w.Flush()
	for _, r := range results {
		if r.FirstErr != nil {
			fmt.Fprintf(out, "first error (median round) of %s %s %s x%d: %v\n", r.System, r.Op, formatSize(uint64(r.Size)), r.Clients, r.FirstErr)
		}
	}
	fmt.Fprintf(out, "(ops/s counts keys; batch-* rows move %d keys per call (Redis: pipelined) and their p50/p99 are per call;\n"+
		" exist rows check %d keys per call: one BatchExist, Redis pipelined EXISTS; GB/s of exist rows is not meaningful)\n", benchstore.BatchKeys, benchstore.ExistKeys)
	fmt.Fprintln(out, "mooncake vs redis (GB/s ratio; p50 ratio, lower is better):")
	for _, r := range results {
		if r.System == benchstore.SystemRedis || r.System == benchstore.SystemRedisProcs {
			continue
		}
		op := r.Op
		if op == "get-into" {
			op = "get"
		}
		peers := []string{benchstore.SystemRedis}
		if r.System == benchstore.SystemClientProcs { // and Redis with its clients in as many processes
			peers = append(peers, benchstore.SystemRedisProcs)
		}
		for _, peer := range peers {
			p := res.Find(peer, op, r.Size, r.Clients)
			vs := ""
			if peer != benchstore.SystemRedis {
				vs = " vs " + peer
			}
			switch {
			case p == nil || p.Ops == 0 || r.Ops == 0:
			case op == "exist":
				fmt.Fprintf(out, "  %s exist (%d keys per call) x%d%s: keys/s %.2fx, p50 %.2fx\n", r.System, benchstore.ExistKeys, r.Clients, vs,
					r.OpsPerSec()/p.OpsPerSec(), float64(r.P50)/float64(p.P50))
			default:
				fmt.Fprintf(out, "  %s %s %s x%d%s: GB/s %.2fx, p50 %.2fx\n", r.System, r.Op, formatSize(uint64(r.Size)), r.Clients, vs,
					r.GBps()/p.GBps(), float64(r.P50)/float64(p.P50))
			}
		}
	}
	printGrantRatios(out, res)
	printCPUPerKey(out, res)
}

// printCPUPerKey prints, for the rows that know all the CPU their phase
// took (client and server processes: mooncake-cproc, and redis and
// redis-cproc when the bench started redis-server), the CPU time per key,
// and the ratios of mooncake-cproc's to Redis's.
func printCPUPerKey(out io.Writer, res *benchstore.Result) {
	header := false
	for _, r := range res.Rows {
		if r.ServerCPU == 0 || r.Ops == 0 || (r.System != benchstore.SystemClientProcs && r.System != benchstore.SystemRedis && r.System != benchstore.SystemRedisProcs) {
			continue
		}
		if !header {
			fmt.Fprintln(out, "CPU time per key, all processes (clients + servers; lower is better):")
			header = true
		}
		per := func(d time.Duration) time.Duration { return d / time.Duration(r.Ops) }
		line := fmt.Sprintf("  %s %s %s x%d: %s (clients %s, servers %s)", r.System, r.Op, formatSize(uint64(r.Size)), r.Clients,
			fmtDur(per(r.CPU+r.ServerCPU)), fmtDur(per(r.CPU)), fmtDur(per(r.ServerCPU)))
		if r.System == benchstore.SystemClientProcs {
			for _, peer := range []string{benchstore.SystemRedis, benchstore.SystemRedisProcs} {
				if p := res.Find(peer, r.Op, r.Size, r.Clients); p != nil && p.Ops > 0 && p.ServerCPU > 0 {
					line += fmt.Sprintf(", %.2fx %s's", float64(r.CPU+r.ServerCPU)/float64(r.Ops)/(float64(p.CPU+p.ServerCPU)/float64(p.Ops)), peer)
				}
			}
		}
		fmt.Fprintln(out, line)
	}
}

// printGrantRatios prints grants on vs off for every phase measured both
// ways (--grants both): the median of the rounds' paired ratios, their
// quartiles, and the ratio of the two sides' median rounds.
func printGrantRatios(out io.Writer, res *benchstore.Result) {
	header := false
	for _, r := range res.Rows {
		if r.System != benchstore.SystemGrants {
			continue
		}
		off := res.Find(benchstore.SystemInProcess, r.Op, r.Size, r.Clients)
		p := res.FindGrants(r.Op, r.Size, r.Clients)
		if off == nil || off.Ops == 0 || r.Ops == 0 || p == nil {
			continue
		}
		if !header {
			fmt.Fprintln(out, "grants on vs off (same run; median of the rounds' paired ratios, each round measuring both one after the other,\n"+
				" [quartiles], and of the median rounds; p50 and CPU time per key ratios: lower is better):")
			header = true
		}
		q1, q3 := p.Ops.Quartiles()
		fmt.Fprintf(out, "  %s %s x%d: ops/s %.3fx [%.3f-%.3f] (medians %.3fx), cpu/key %.3fx (%s vs %s), p50 %.2fx\n", r.Op, formatSize(uint64(r.Size)), r.Clients,
			p.Ops.Median(), q1, q3, r.OpsPerSec()/off.OpsPerSec(), p.CPU.Median(), fmtDur(r.CPUPerOp()), fmtDur(off.CPUPerOp()), float64(r.P50)/float64(off.P50))
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fus", float64(d)/1e3)
	default:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
}

func printBenchStoreSecurity(out io.Writer, res *benchstore.SecurityResult) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "feature\top\tsize\tclients\toff ops/s\ton ops/s\ton/off\tquartiles\tmedians\toff cpu/key\ton cpu/key\tcpu on/off\toff p50\ton p50\terrors\t")
	rounds := 0
	for _, r := range res.Rows {
		q1, q3 := r.Paired.Quartiles()
		rounds = max(rounds, len(r.Paired))
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%.0f\t%.0f\t%.3f\t%.3f-%.3f\t%.3f\t%s\t%s\t%.3f\t%s\t%s\t%d\t\n", r.Feature, r.Op, formatSize(uint64(r.Size)), r.Clients,
			r.Off.OpsPerSec(), r.On.OpsPerSec(), r.Ratio(), q1, q3, r.MedianRatio(), fmtDur(r.Off.CPUPerOp()), fmtDur(r.On.CPUPerOp()), r.CPU.Median(),
			fmtDur(r.Off.P50), fmtDur(r.On.P50), r.Off.Errors+r.On.Errors)
	}
	w.Flush()
	fmt.Fprintf(out, "(on/off: the median over the %d rounds of each round's ratio, on over off, of its two measurements, taken one right after the other;\n"+
		" quartiles: the middle half of those ratios; medians: the ratio of the two sides' median rounds; off/on ops/s, cpu/key and p50: the median rounds';\n"+
		" cpu/key: this process's CPU time per key, master, nodes and clients included, and cpu on/off the median of its paired ratios:\n"+
		" it compares the two even when other load makes ops/s noisy)\n", rounds)
	for _, r := range res.Rows {
		for _, x := range []benchstore.Row{r.Off, r.On} {
			if x.FirstErr != nil {
				fmt.Fprintf(out, "first error of %s %s %s x%d: %v\n", r.Feature, r.Op, formatSize(uint64(r.Size)), r.Clients, x.FirstErr)
			}
		}
	}
}

// startCPUProfile writes a CPU profile to path (a --cpuprofile flag) until
// stop is called; an empty path profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: fmt.Errorf("--cpuprofile: %w", err)}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
