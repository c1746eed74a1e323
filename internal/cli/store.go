package cli

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/transfer"
	"github.com/spf13/cobra"
)

func newStoreNodeCmd() *cobra.Command {
	var (
		masterAddr, segSize, host, transport string
		rpcPort, httpPort                    int
		grace, ping                          time.Duration
		verbose                              bool
		rootFSDir, diskCapacity              string
		enableOffload, offloadOnEvict        bool
		promotionOnHit                       bool
		secret, grantKeyFile                 string
		security                             clientSecurityFlags
	)
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Run a store storage node contributing a memory segment to the pool",
		Long: `Run a storage node: it allocates --segment-size bytes of engine-managed memory,
serves it through its transfer engine, mounts it at the master, remounts after a
master restart, and unmounts gracefully on SIGINT/SIGTERM. It serves /health (503
when the master stopped answering) and /metrics on --http-port. The first line on
stdout reports the mounted segment and the HTTP address.

With --root-fs-dir DIR --enable-offload the node has a disk tier (Mooncake's
root_fs_dir / SSD offload): objects the master evicts from its memory are copied
to DIR (--offload-on-evict), read back over HTTP with their CRC32C checked and put
back into memory (--promotion-on-hit), at most --disk-capacity bytes are kept, and
a node restarted on the same DIR re-reports them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := parseSize(segSize)
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--segment-size: %w", err)}
			}
			log := cmdLogger(cmd, verbose)
			cfg := storenode.Config{Master: masterAddrOr(masterAddr), Secret: secretOr(secret), SegmentSize: size, PingInterval: ping, UnmountGrace: grace, Logger: log,
				Engine:    transfer.Config{LocalHostname: host, RPCPort: rpcPort, Transport: transport, Logger: log},
				RootFSDir: rootFSDir, EnableOffload: enableOffload, OffloadOnEvict: offloadOnEvict, PromotionOnHit: promotionOnHit}
			sec, err := security.resolve()
			if err != nil {
				return err
			}
			cfg.Token, cfg.TenantID, cfg.TLS = sec.token, sec.tenantID, sec.tls
			keys, err := grantKeys(grantKeyFile)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			if keys != nil {
				cfg.Engine.Grants = grant.NewVerifier(keys, nil)
			}
			if cfg.DiskCapacity, err = parseSize(diskCapacity); err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--disk-capacity: %w", err)}
			}
			if httpPort >= 0 {
				cfg.HTTPAddr = net.JoinHostPort(host, strconv.Itoa(httpPort))
			}
			if err := cfg.Validate(); err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			return storenode.Run(cmd.Context(), cfg, func(n *storenode.Node) {
				fmt.Fprintf(cmd.OutOrStdout(), "store node mounted segment=%s size=%s master=%s http=%s disk=%s restored=%d\n", n.Name(), formatSize(size), cfg.Master, n.HTTPAddr(), n.DiskURL(), n.Client().Restored())
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&masterAddr, "master", "", "master address HOST:PORT or HA cluster etcd://HOST:PORT[;HOST:PORT][/CLUSTER] (default $MOONCAKE_MASTER or 127.0.0.1:50051)")
	f.StringVar(&segSize, "segment-size", "1GiB", "memory contributed to the pool (e.g. 512MiB, 4GiB, 4gb)")
	f.StringVar(&host, "host", "127.0.0.1", "hostname peers use to reach this node's transfer engine")
	f.IntVar(&rpcPort, "rpc-port", 0, "transfer engine RPC port (0 = pick a free port)")
	f.IntVar(&httpPort, "http-port", 0, "/health and /metrics port (0 = pick a free port, -1 = disabled)")
	f.StringVar(&transport, "transport", "auto", "transfer transport: auto, tcp, shm")
	f.DurationVar(&grace, "unmount-grace", 2*time.Second, "on shutdown, wait this long for readers holding leases")
	f.DurationVar(&ping, "ping-interval", time.Second, "liveness ping period")
	f.StringVar(&rootFSDir, "root-fs-dir", "", "disk tier directory (Mooncake's root_fs_dir); used with --enable-offload")
	f.BoolVar(&enableOffload, "enable-offload", false, "enable the disk tier under --root-fs-dir")
	f.BoolVar(&offloadOnEvict, "offload-on-evict", true, "copy objects evicted from memory to the disk tier")
	f.BoolVar(&promotionOnHit, "promotion-on-hit", true, "a read from the disk tier puts the value back into memory")
	f.StringVar(&diskCapacity, "disk-capacity", "10GiB", "bytes the disk tier keeps (least recently used dropped)")
	f.StringVar(&secret, "secret", "", secretUsage)
	security.register(f)
	f.StringVar(&grantKeyFile, "grant-key-file", "", grantKeyUsage)
	f.BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	return cmd
}
