package cli

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/spf13/cobra"
)

func newMasterCmd() *cobra.Command {
	d := master.DefaultServerConfig()
	var (
		host           string
		port, httpPort int
		strategy       string
		verbose        bool
		ha             haFlags
	)
	cfg := d
	cmd := &cobra.Command{
		Use:   "master",
		Short: "Run the store master (metadata, allocation, leases, eviction; gRPC + admin HTTP)",
		Long: `Run the Mooncake Store master. It serves the master RPC (gRPC) on --port and
the admin HTTP API (/health, /metrics, /query_key, /get_all_keys, /get_all_segments,
/query_segment) on --http-port (0 picks a free port, -1 disables). The first line
on stdout reports the addresses actually bound.

With --ha --etcd HOST:PORT[;HOST:PORT] several masters elect a leader in etcd
(key mooncake-store/<cluster>/master_view, --ha-lease TTL): only the leader
listens on --port, each new leader learns the objects from the storage nodes
when they remount (--durable-metadata, on by default), and clients and storage nodes
given --master etcd://HOST:PORT[;HOST:PORT][/CLUSTER] follow it. The admin port
also answers /role and /leader.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Addr = net.JoinHostPort(host, strconv.Itoa(port))
			cfg.HTTPAddr = ""
			if httpPort >= 0 {
				cfg.HTTPAddr = net.JoinHostPort(host, strconv.Itoa(httpPort))
			}
			cfg.Core.Strategy = master.Strategy(strategy)
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			if err := cfg.Validate(); err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			if ha.enabled {
				return runHAMaster(cmd, cfg, ha)
			}
			s, err := master.NewServer(cfg)
			if err != nil {
				return err
			}
			gl, hl, err := cfg.Listen()
			if err != nil {
				return err
			}
			httpAddr := ""
			if hl != nil {
				httpAddr = hl.Addr().String()
			}
			fmt.Fprintf(cmd.OutOrStdout(), "master listening grpc=%s http=%s\n", gl.Addr(), httpAddr)
			return s.Run(cmd.Context(), gl, hl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&host, "host", "0.0.0.0", "address to listen on")
	f.IntVar(&port, "port", 50051, "gRPC port (0 = pick a free port)")
	f.IntVar(&httpPort, "http-port", 9003, "admin HTTP port (0 = pick, -1 = disabled)")
	f.StringVar(&strategy, "strategy", string(d.Core.Strategy), "allocation strategy: random, free_ratio_first, local_first")
	f.DurationVar(&cfg.Core.LeaseTTL, "lease-ttl", d.Core.LeaseTTL, "read lease granted by a get")
	f.DurationVar(&cfg.Core.ClientTTL, "client-ttl", d.Core.ClientTTL, "a client silent this long is dropped and its segments unmounted")
	f.DurationVar(&cfg.Core.PutTimeout, "put-timeout", d.Core.PutTimeout, "an unfinished put older than this may be preempted")
	f.DurationVar(&cfg.Core.PutReleaseTimeout, "put-release-timeout", d.Core.PutReleaseTimeout, "the space of an unfinished put is released after this")
	f.Float64Var(&cfg.Core.HighWatermark, "eviction-high-watermark", d.Core.HighWatermark, "evict when used/capacity passes this ratio")
	f.Float64Var(&cfg.Core.EvictionRatio, "eviction-ratio", d.Core.EvictionRatio, "fraction of capacity one eviction frees")
	f.BoolVar(&cfg.Core.Durable, "durable-metadata", true, "objects survive a master restart or failover: nodes re-report the objects their memory holds when they remount (false: a new master starts empty, as Mooncake's)")
	f.DurationVar(&cfg.TickInterval, "tick", 10*time.Millisecond, "period of liveness, timeout and eviction checks")
	f.BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	ha.register(f)
	return cmd
}
