package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvcache-go/mooncake/internal/disktier"
	"github.com/kvcache-go/mooncake/internal/dummyclient"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

func newClientCmd() *cobra.Command {
	var (
		masterAddr, segSize, bufSize, host, transport string
		secret                                        string
		port, rpcPort                                 int
		verbose                                       bool
		disk                                          diskFlags
		security                                      clientSecurityFlags
		allowUIDs                                     string
	)
	cmd := &cobra.Command{
		Use:   "client",
		Short: "Run a store client that serves dummy clients on this host (Mooncake's mooncake_client)",
		Long: `Run Mooncake's "real client": a store client that contributes --segment-size bytes
to the pool and serves the dummy clients of this host (MooncakeDistributedStore.setup_dummy
with the address HOST:PORT). Each dummy's memory pool is shared memory this process creates,
registers with its transfer engine and hands over, so dummies' puts and gets of pool buffers
move without a copy. The first line on stdout names the address and the mounted segment.

A dummy acts with this client's credentials, so only dummies running as this process's user
or root are served, and those of the users --dummy-allow-uids lists; a dummy likewise talks
only to a real client of its own user, root, or one $MOONCAKE_REAL_CLIENT_UIDS lists.

With --root-fs-dir DIR --enable-offload the client's segment has a disk tier, as a
storage node's (mooncake store): Mooncake's mooncake_client --enable_offload.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			seg, err := parseSize(segSize)
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--segment-size: %w", err)}
			}
			buf, err := parseSize(bufSize)
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--local-buffer-size: %w", err)}
			}
			dcfg, err := disk.config()
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			sec, err := security.resolve()
			if err != nil {
				return err
			}
			uids, err := dummyclient.ParseUIDs(allowUIDs)
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("--dummy-allow-uids: %w", err)}
			}
			log := cmdLogger(cmd, verbose)
			addr := net.JoinHostPort(host, strconv.Itoa(port))
			return runClient(cmd.Context(), clientConfig{master: masterAddrOr(masterAddr), secret: secretOr(secret), token: sec.token, tenantID: sec.tenantID, tls: sec.tls, addr: addr, segment: seg, buffer: buf,
				engine: transfer.Config{LocalHostname: host, RPCPort: rpcPort, Transport: transport, Logger: log}, log: log, disk: dcfg, allowUIDs: uids},
				func(segment string) {
					fmt.Fprintf(cmd.OutOrStdout(), "mooncake client serving dummy clients at %s; segment %s mounted size=%s master=%s\n",
						addr, segment, formatSize(seg), masterAddrOr(masterAddr))
				})
		},
	}
	f := cmd.Flags()
	f.StringVar(&masterAddr, "master", "", "master address HOST:PORT (default $MOONCAKE_MASTER or 127.0.0.1:50051)")
	f.StringVar(&host, "host", "127.0.0.1", "hostname of this client (its transfer engine and the dummy address)")
	f.IntVar(&port, "port", 50052, "port of the address dummy clients are given (setup_dummy's server_address)")
	f.IntVar(&rpcPort, "rpc-port", 0, "transfer engine RPC port (0 = pick a free port)")
	f.StringVar(&segSize, "segment-size", "1GiB", "memory contributed to the pool (e.g. 512MiB, 4gb)")
	f.StringVar(&bufSize, "local-buffer-size", "256MiB", "staging buffer for values outside registered memory")
	f.StringVar(&transport, "transport", "auto", "transfer transport: auto, tcp, shm")
	f.StringVar(&allowUIDs, "dummy-allow-uids", "", "comma-separated user ids, besides this process's and root, whose dummy clients are served (a dummy acts with this client's credentials)")
	f.StringVar(&secret, "secret", "", secretUsage)
	security.register(f)
	f.BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	disk.register(f)
	return cmd
}

type clientConfig struct {
	master, addr    string
	secret, token   string
	tenantID        string
	tls             *tls.Config // nil: plaintext
	segment, buffer uint64
	engine          transfer.Config
	log             *slog.Logger
	disk            *disktier.Config // nil = no disk tier
	allowUIDs       []uint32         // dummyclient.Config.AllowUIDs
}

// diskFlags are the disk tier flags of `mooncake client` (those of `mooncake store`).
type diskFlags struct {
	dir, capacity                   string
	enable, offloadOnEvict, promote bool
}

func (d *diskFlags) register(f *pflag.FlagSet) {
	f.StringVar(&d.dir, "root-fs-dir", "", "disk tier directory (Mooncake's root_fs_dir); used with --enable-offload")
	f.BoolVar(&d.enable, "enable-offload", false, "enable the disk tier under --root-fs-dir")
	f.BoolVar(&d.offloadOnEvict, "offload-on-evict", true, "copy objects evicted from memory to the disk tier")
	f.BoolVar(&d.promote, "promotion-on-hit", true, "a read from the disk tier puts the value back into memory")
	f.StringVar(&d.capacity, "disk-capacity", "10GiB", "bytes the disk tier keeps (least recently used dropped)")
}

// config is the disk tier to open (nil when --enable-offload is not set).
func (d *diskFlags) config() (*disktier.Config, error) {
	if !d.enable {
		return nil, nil
	}
	if d.dir == "" {
		return nil, errors.New("--enable-offload needs --root-fs-dir")
	}
	n, err := parseSize(d.capacity)
	if err != nil {
		return nil, fmt.Errorf("--disk-capacity: %w", err)
	}
	return &disktier.Config{Dir: d.dir, Capacity: n, OffloadOnEvict: d.offloadOnEvict, PromotionOnHit: d.promote}, nil
}

// clientDiskPing is the ping period of a client with a disk tier: offloaded
// objects free their memory two pings after the eviction.
const clientDiskPing = 100 * time.Millisecond

// runClient runs the store client and the dummy-client server until ctx ends.
func runClient(ctx context.Context, cfg clientConfig, ready func(segment string)) error {
	eng, err := transfer.Open(ctx, cfg.engine)
	if err != nil {
		return err
	}
	scfg := store.Config{Master: cfg.master, Mover: eng, SegmentSize: cfg.segment,
		LocalBufferSize: cfg.buffer, Secret: cfg.secret, Token: cfg.token, TenantID: cfg.tenantID, TLS: cfg.tls, Logger: cfg.log.With("store", eng.Name())}
	if cfg.disk != nil {
		host := cmp.Or(cfg.engine.LocalHostname, "127.0.0.1")
		d, err := disktier.Listen(*cfg.disk, net.JoinHostPort(host, "0"))
		if err != nil {
			return errors.Join(err, eng.Close())
		}
		defer d.Close()
		scfg.Disk, scfg.PingInterval = d, clientDiskPing
	}
	c, err := store.New(ctx, scfg)
	if err != nil {
		return errors.Join(err, eng.Close())
	}
	srv, err := dummyclient.New(dummyclient.Config{Addr: cfg.addr, Store: c, Name: eng.Name(), Logger: cfg.log, AllowUIDs: cfg.allowUIDs})
	if err == nil {
		var ln *net.UnixListener
		if ln, err = srv.Listen(); err == nil {
			ready(c.SegmentName())
			err = srv.Serve(ctx, ln)
		}
	}
	return errors.Join(err, c.Close(), eng.Close())
}
