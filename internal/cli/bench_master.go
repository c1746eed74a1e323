package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/bench/benchproc"
	benchmaster "github.com/kvcache-go/mooncake/internal/bench/master"
)

// newBenchMasterCmd is `mooncake bench master`: the master at pool scale,
// as real processes (internal/bench/master). Its hidden --worker mode is
// one client process of the many-clients phase.
func newBenchMasterCmd() *cobra.Command {
	cfg := benchmaster.DefaultConfig()
	var (
		phases          string
		asJSON, noRedis bool
		quiet           bool
		worker          benchmaster.WorkerConfig
		isWorker        bool
	)
	cmd := &cobra.Command{
		Use:   "master",
		Short: "The master at pool scale (millions of objects), as real processes, next to Redis",
		Long: `Starts ` + "`mooncake master`" + ` (durable metadata) and --nodes ` + "`mooncake store`" + ` processes
on 127.0.0.1 (segments sized for --objects), loads --objects objects of
--value-size bytes by BatchPut from --clients clients of this process, and
runs the phases (--phases, load always first):

  load       puts/s; the master's RSS (and Go heap, when /metrics has it) per
             object; Redis: the same keys by pipelined SETs, used_memory per key
  ops        8 clients, 4 KiB gets and upserts for --duration: ops/s, p50/p99,
             at N and (--baseline) on a fresh pool of 10k objects; Redis alike
  bulk       a full listing by pages of 10k under that load, /api/summary and
             /dashboard/ polled every second; get p99 during it vs the ops
             phase; nodes dropped, objects lost; Redis: SCAN under load
  remove     RemoveByRegex of the even-numbered keys: time and count
  restart    SIGKILL the master, a new one on the same ports: time until
             every remaining object exists again (--restore-timeout), no
             removed one back (not with --ha)
  failover   --ha only: SIGKILL the leading master (--failover stop: SIGSTOP
             it): time until the standby leads (election) and until every
             remaining object exists again through it (--restore-timeout),
             no removed one back; then a new standby (kill) or the old
             leader resumed, which must step down
  removeall  RemoveAll under the load: time, count, nodes dropped; Redis FLUSHALL
  clients    --workers processes x --worker-clients clients, 4 KiB gets and
             upserts: ops/s and p99; a new client process's time to its
             first get (median of --probes); Redis: as many connections

With --ha the master is two ` + "`mooncake master --ha`" + ` candidates of one
cluster in etcd (--etcd auto: Debian's etcd started on free loopback ports;
or HOST:PORT of a running one), the nodes and clients addressing them as
etcd://HOST:PORT/CLUSTER, and the failover phase replaces the restart phase.

Redis is Debian's redis-server started on a free loopback port (--redis auto),
skipped when absent. Every process is stopped at the end, and killed with
the bench if it dies.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if isWorker {
				worker.Transport, worker.Clients, worker.Duration, worker.Pin = cfg.Transport, cfg.WorkerClients, cfg.Duration, cfg.Pin
				return benchmaster.RunWorker(cmd.Context(), worker, cmd.InOrStdin(), cmd.OutOrStdout())
			}
			if phases != "" && phases != "all" {
				for _, p := range strings.Split(phases, ",") {
					cfg.Phases = append(cfg.Phases, strings.TrimSpace(p))
				}
			}
			if noRedis {
				cfg.Redis = "off"
			}
			if cfg.Binary == "" {
				var err error
				if cfg.Binary, err = os.Executable(); err != nil {
					return err
				}
			}
			if err := cfg.Validate(); err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			log := cmdLogger(cmd, false)
			if quiet {
				log = slog.New(slog.DiscardHandler)
			}
			res, err := benchmaster.Run(cmd.Context(), cfg, log)
			if res != nil {
				if asJSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					if err := enc.Encode(res); err != nil {
						return err
					}
				} else {
					printBenchMaster(cmd.OutOrStdout(), res, cfg)
				}
			}
			if err != nil {
				return err
			}
			if len(res.Failures) > 0 {
				return &ExitError{Code: 1, Err: fmt.Errorf("bench master: %d phase(s) failed: %s", len(res.Failures), strings.Join(res.Failures, "; "))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Objects, "objects", cfg.Objects, "objects loaded into the pool (N)")
	f.IntVar(&cfg.Clients, "clients", cfg.Clients, "clients loading the pool in parallel (C)")
	f.IntVar(&cfg.ValueSize, "value-size", cfg.ValueSize, "bytes per loaded object")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "duration of each timed load (ops, clients; the least of bulk)")
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "storage node processes")
	f.StringVar(&phases, "phases", "all", "comma-separated phases to run: "+strings.Join(benchmaster.AllPhases, ",")+" (load always runs)")
	f.IntVar(&cfg.Baseline, "baseline", cfg.Baseline, "first run the ops phase on a fresh pool of this many objects, the peer of ops/s at N (0: skip)")
	f.StringVar(&cfg.Redis, "redis", cfg.Redis, `"auto" (start redis-server if installed), "off", or HOST:PORT of a running Redis (flushed!)`)
	f.BoolVar(&noRedis, "skip-redis", false, "do not measure Redis (--redis off)")
	f.BoolVar(&cfg.Pin, "pin", false, "load the objects, and the keys the get/put loads read, hard-pinned: no eviction takes them under the later phases")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "client processes of the clients phase")
	f.IntVar(&cfg.WorkerClients, "worker-clients", cfg.WorkerClients, "store clients per worker process (one transfer engine each process)")
	f.IntVar(&cfg.Probes, "probes", cfg.Probes, "new client processes timed to their first get (median)")
	f.StringVar(&cfg.Transport, "transport", cfg.Transport, "transfer transport: auto, tcp, shm")
	f.DurationVar(&cfg.PhaseTimeout, "phase-timeout", cfg.PhaseTimeout, "deadline of each phase")
	f.DurationVar(&cfg.RestoreTimeout, "restore-timeout", cfg.RestoreTimeout, "restart and failover phases: deadline for every object to be back")
	f.BoolVar(&cfg.HA, "ha", false, "two `mooncake master --ha` candidates in etcd, nodes and clients on etcd://; the failover phase instead of restart")
	f.StringVar(&cfg.Etcd, "etcd", cfg.Etcd, `with --ha: "auto" (start Debian's etcd on free loopback ports) or HOST:PORT[;HOST:PORT] of a running etcd`)
	f.DurationVar(&cfg.HALease, "ha-lease", cfg.HALease, "with --ha: the candidates' election lease (whole seconds): a crashed leader is replaced after it")
	f.StringVar(&cfg.FailoverSignal, "failover", cfg.FailoverSignal, "with --ha: how the failover phase stops the leader: kill (SIGKILL) or stop (SIGSTOP, resumed after)")
	f.DurationVar(&cfg.RPCTimeout, "rpc-timeout", 0, "deadline of one master call of the listing and removing client (0: the store client's default, 5s)")
	f.StringVar(&cfg.Binary, "binary", "", "mooncake binary for the master, nodes and workers (default: this one)")
	f.BoolVar(&asJSON, "json", false, "print the figures as JSON (durations in ns)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	// The worker mode: one client process of the clients phase.
	f.BoolVar(&isWorker, "worker", false, "run as a client process of the clients phase")
	f.StringVar(&worker.Master, "master", "", "worker: master gRPC address")
	f.IntVar(&worker.ID, "worker-id", 0, "worker: key prefix number")
	f.BoolVar(&worker.Probe, "probe", false, "worker: exit after the first get")
	for _, h := range []string{"worker", "master", "worker-id", "probe"} {
		_ = f.MarkHidden(h)
	}
	return cmd
}

func printBenchMaster(out io.Writer, r *benchmaster.Result, cfg benchmaster.Config) {
	pinned := ""
	if r.Pinned {
		pinned = " (hard-pinned)"
	}
	fmt.Fprintf(out, "master at scale: N=%d objects%s of %d B (%d B of segment each, header included), %d loading clients, %d node(s) x %s segment\n",
		r.Objects, pinned, r.ValueSize, r.ObjectBytes, r.Clients, r.Nodes, formatSize(r.SegmentSize))
	if r.HA != nil {
		fmt.Fprintf(out, "ha: %d master candidates, cluster %s, etcd %s, lease %v\n", r.HA.Candidates, r.HA.Cluster, r.HA.Etcd, r.HA.Lease)
	}
	if r.RedisSkipped != "" {
		fmt.Fprintf(out, "redis: %s (skipped)\n", r.RedisSkipped)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "phase\tfigure\tmooncake\tredis\tmooncake/redis")
	row := func(phase, fig string, mc float64, rd *float64, format string) {
		m := fmt.Sprintf(format, mc)
		rs, ratio := "-", "-"
		if rd != nil {
			rs = fmt.Sprintf(format, *rd)
			if *rd != 0 {
				ratio = fmt.Sprintf("%.2fx", mc / *rd)
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", phase, fig, m, rs, ratio)
	}
	text := func(phase, fig, mc string) { fmt.Fprintf(w, "%s\t%s\t%s\t-\t-\n", phase, fig, mc) }
	// remountRows: each node's remount as it logged it: the scan of its
	// segment, then the whole remount (scan, calls, the master's decisions).
	remountRows := func(phase string, lines []string, master string) {
		if master != "" {
			f := func(k string) string { return cmp.Or(benchproc.Field(master, k), "?") }
			text(phase, "master's last restore session: reports; all, deciding", fmt.Sprintf("%s; %s, %s", f("reports"), f("took"), f("decide")))
			text(phase, "master's last restore session: index wait, idle", fmt.Sprintf("%s, %s", f("index_wait"), f("idle")))
		}
		for i, l := range lines {
			if l == "" {
				text(phase, fmt.Sprintf("node %d remount", i), "not logged")
				continue
			}
			f := func(k string) string { return cmp.Or(benchproc.Field(l, k), "?") }
			text(phase, fmt.Sprintf("node %d remount: held, calls; scan, all", i),
				fmt.Sprintf("%s, %s; %s, %s", f("held"), f("calls"), f("scan"), f("took")))
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	ptr := func(v float64) *float64 { return &v }
	if l := r.Load; l != nil {
		var rp, rb *float64
		if l.Redis != nil {
			rp, rb = ptr(l.Redis.SetsPerSec), ptr(l.Redis.BytesPerKey)
		}
		row("load", "puts/s (BatchPut; redis pipelined SET)", l.PutsPerSec, rp, "%.0f")
		text("load", "objects stored / errors", fmt.Sprintf("%d / %d", l.Puts, l.Errors))
		row("load", "memory B/object (master RSS; redis used_memory)", l.RSSPerObject, rb, "%.1f")
		if l.HeapExposed {
			row("load", "master Go heap B/object", l.HeapPerObject, rb, "%.1f")
		} else {
			text("load", "master Go heap B/object", "not in /metrics")
		}
	}
	opsRows := func(phase string, m benchmaster.OpsFigures, rd *benchmaster.OpsFigures) {
		var ro, r50, r99 *float64
		if rd != nil {
			ro, r50, r99 = ptr(rd.OpsPerSec), ptr(ms(rd.GetP50)), ptr(ms(rd.GetP99))
		}
		row(phase, fmt.Sprintf("ops/s (%d clients, 4 KiB get+upsert)", m.Clients), m.OpsPerSec, ro, "%.0f")
		row(phase, "get p50 ms", ms(m.GetP50), r50, "%.3f")
		row(phase, "get p99 ms", ms(m.GetP99), r99, "%.3f")
		if rd != nil {
			r50, r99 = ptr(ms(rd.PutP50)), ptr(ms(rd.PutP99))
		}
		row(phase, "put p50 ms", ms(m.PutP50), r50, "%.3f")
		row(phase, "put p99 ms", ms(m.PutP99), r99, "%.3f")
		if m.Errors > 0 {
			text(phase, "errors (first)", fmt.Sprintf("%d (%s)", m.Errors, m.FirstErr))
		}
	}
	if b := r.Baseline; b != nil {
		opsRows(fmt.Sprintf("ops@%d", r.BaseN), *b, nil)
	}
	if o := r.Ops; o != nil {
		opsRows(fmt.Sprintf("ops@%d", r.Objects), o.Mooncake, o.Redis)
		if b := r.Baseline; b != nil && b.OpsPerSec > 0 {
			text("ops", fmt.Sprintf("ops/s at N / at %d", r.BaseN), fmt.Sprintf("%.2fx", o.Mooncake.OpsPerSec/b.OpsPerSec))
		}
	}
	if b := r.Bulk; b != nil {
		var rl *float64
		if b.Redis != nil {
			rl = ptr(ms(b.Redis.ListTime))
		}
		row("bulk", "full listing ms (pages of 10k; redis SCAN)", ms(b.ListTime), rl, "%.1f")
		lo, hi := 0, 0
		if len(b.Counted) > 0 {
			lo, hi = slices.Min(b.Counted), slices.Max(b.Counted)
		}
		text("bulk", "listings / keys counted (min..max)", fmt.Sprintf("%d / %d..%d (want %d)", b.Listings, lo, hi, r.Load.Puts))
		var rg *float64
		if b.Redis != nil {
			rg = ptr(ms(b.Redis.Load.GetP99))
		}
		row("bulk", "get p99 ms during listing", ms(b.Load.GetP99), rg, "%.3f")
		text("bulk", "get p99 during listing / ops phase", fmt.Sprintf("%.2fx", b.GetP99Ratio))
		text("bulk", "ops/s during listing", fmt.Sprintf("%.0f", b.Load.OpsPerSec))
		text("bulk", "polls / errors; slowest summary, dashboard", fmt.Sprintf("%d / %d; %.1f ms, %.1f ms", b.Polls, b.PollErrors, ms(b.SummaryMax), ms(b.DashboardMax)))
		text("bulk", "nodes dropped / segments mounted", fmt.Sprintf("%d / %d", b.NodesDropped, b.Segments))
		text("bulk", "objects present / lost", fmt.Sprintf("%d / %d", b.Present, b.Lost))
	}
	if rm := r.Remove; rm != nil {
		text("remove", "RemoveByRegex "+rm.Pattern, fmt.Sprintf("%d removed (want %d) in %.1f ms", rm.Removed, rm.Want, ms(rm.Elapsed)))
		text("remove", "loaded keys listed after", fmt.Sprint(rm.ListLeft))
	}
	if rs := r.Restart; rs != nil {
		state := "recovered"
		if !rs.Recovered {
			state = fmt.Sprintf("NOT recovered within %v", rs.Deadline)
		}
		text("restart", "kill -9, same ports: objects back", fmt.Sprintf("%d of %d, %s", rs.Present, rs.Want, state))
		text("restart", "recovery time", fmt.Sprintf("%.0f ms", ms(rs.Took)))
		text("restart", "ms from the kill: master up / remounting / counted", fmt.Sprintf("%.0f / %.0f / %.0f", ms(rs.Up), ms(rs.Mounted), ms(rs.Counted)))
		remountRows("restart", rs.NodeRemounts, rs.MasterRestore)
		text("restart", "removed objects back", fmt.Sprintf("%d of %d", rs.RemovedBack, rs.RemovedTested))
		text("restart", "master RSS after", formatSize(rs.RSSAfter))
	}
	if fo := r.Failover; fo != nil {
		state := "recovered"
		if !fo.Recovered {
			state = fmt.Sprintf("NOT recovered within %v", fo.Deadline)
		}
		sig := map[string]string{benchmaster.FailoverKill: "SIGKILL", benchmaster.FailoverStop: "SIGSTOP"}[fo.Signal]
		text("failover", sig+" the leader: objects back", fmt.Sprintf("%d of %d, %s", fo.Present, fo.Want, state))
		text("failover", fmt.Sprintf("election ms (standby leads; lease %v)", fo.Lease), fmt.Sprintf("%.0f (view %d -> %d)", ms(fo.Election), fo.OldView, fo.NewView))
		text("failover", "nodes remounted on it ms", fmt.Sprintf("%.0f (%.0f after the election)", ms(fo.Remount), ms(fo.Remount-fo.Election)))
		text("failover", "failover ms (every object back)", fmt.Sprintf("%.0f (%.0f after the election)", ms(fo.Took), ms(fo.Took-fo.Election)))
		text("failover", "ms from the signal: new leader counts every object", fmt.Sprintf("%.0f", ms(fo.Counted)))
		remountRows("failover", fo.NodeRemounts, fo.MasterRestore)
		text("failover", "removed objects back", fmt.Sprintf("%d of %d", fo.RemovedBack, fo.RemovedTested))
		if fo.OldLeader != "" {
			old := fo.OldLeader
			if fo.StepDown > 0 {
				old += fmt.Sprintf(" %.0f ms after SIGCONT", ms(fo.StepDown))
			}
			text("failover", "old leader", old)
		}
		text("failover", "new leader RSS", formatSize(fo.RSSAfter))
	}
	if ra := r.RemoveAll; ra != nil {
		var rf *float64
		if ra.Redis != nil {
			rf = ptr(ms(ra.Redis.Elapsed))
		}
		row("removeall", "time ms (under load; redis FLUSHALL)", ms(ra.Elapsed), rf, "%.1f")
		text("removeall", "removed (loaded keys present before)", fmt.Sprintf("%d (%d)", ra.Removed, ra.Want))
		text("removeall", "nodes dropped / segments / keys listed after", fmt.Sprintf("%d / %d / %d", ra.NodesDropped, ra.Segments, ra.ListLeft))
	}
	if c := r.ManyCl; c != nil {
		opsRows(fmt.Sprintf("clients %dx%d", c.Processes, c.PerProcess), c.Load, c.Redis)
		var firsts []string
		for _, d := range c.FirstOp {
			firsts = append(firsts, fmt.Sprintf("%.0f", ms(d)))
		}
		text("clients", "new process to first get ms (median; all)", fmt.Sprintf("%.0f (%s)", ms(c.FirstOpMedian), strings.Join(firsts, ",")))
	}
	w.Flush()
	fmt.Fprintln(out, "master after each phase (/api/summary):")
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "phase\tobjects\tsegments\tclients\tused\tcapacity\tevictions (runs; use at first)\tclients dropped\tputs timed out\t")
	for _, s := range r.After {
		if s.Err != "" {
			fmt.Fprintf(w, "%s\t%s\t\n", s.Phase, s.Err)
			continue
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\t%d (%d; %.3f)\t%d\t%d\t\n", s.Phase, s.Objects, s.Segments, s.Clients, formatSize(s.Used), formatSize(s.Capacity),
			s.Evictions, s.EvictionRuns, s.FirstEvictionUse, s.ClientsDropped, s.PutsTimedOut)
	}
	w.Flush()
	if r.ManyCl != nil && r.ManyCl.Redis != nil {
		fmt.Fprintln(out, "(clients phase: mooncake clients in worker processes, redis connections in this process)")
	}
	for _, f := range r.Failures {
		fmt.Fprintf(out, "FAILED %s\n", f)
	}
}
