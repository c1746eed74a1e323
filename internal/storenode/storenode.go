package storenode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/grant"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/disktier"
	"github.com/kvcache-go/mooncake/internal/httpserve"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// Config configures a storage node.
type Config struct {
	Master       string          // master gRPC address "host:port", or "etcd://h1:2379;h2:2379[/CLUSTER]" for an HA cluster
	Secret       string          // cluster secret the master needs for the unmount on Close (store.Config.Secret)
	Token        string          // tenant credential (store.Config.Token); "" with tenants on: Secret is the credential
	TenantID     string          // the tenant named (store.Config.TenantID, Mooncake's tenant_id)
	TLS          *tls.Config     // reach the master over TLS (store.Config.TLS); nil: plaintext
	SegmentSize  uint64          // bytes contributed to the pool
	Engine       transfer.Config // the node's transfer engine
	PingInterval time.Duration   // liveness ping period (1s)
	RPCTimeout   time.Duration   // deadline of one master call (5s)
	UnmountGrace time.Duration   // graceful unmount wait on shutdown (2s)
	HTTPAddr     string          // /health and /metrics listen address for Run ("" = none; port 0 picks one)
	Logger       *slog.Logger

	// Disk tier (Mooncake's root_fs_dir / SSD offload), on when RootFSDir is
	// set and EnableOffload: objects the master evicts from the segment are
	// copied to files under RootFSDir (OffloadOnEvict), readers fetch them
	// over HTTP from DiskAddr and put them back into memory
	// (PromotionOnHit), at most DiskCapacity bytes are kept (least recently
	// used dropped), and a restarted node re-reports them.
	RootFSDir      string
	EnableOffload  bool
	OffloadOnEvict bool
	PromotionOnHit bool
	DiskCapacity   uint64 // bytes (default 10 GiB)
	DiskAddr       string // listen address of the disk read server (default: the engine's host, port 0)
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Master == "" {
		return fmt.Errorf("storenode: no master address")
	}
	if c.SegmentSize < 4096 {
		return fmt.Errorf("storenode: segment size %d below 4096 bytes", c.SegmentSize)
	}
	if c.EnableOffload && c.RootFSDir == "" {
		return fmt.Errorf("storenode: --enable-offload needs --root-fs-dir")
	}
	return c.Engine.Validate()
}

// Node is a running storage node.
type Node struct {
	eng    *transfer.Engine
	client *store.Client
	log    *slog.Logger
	size   uint64
	disk   *disktier.Server // nil = no disk tier

	mu sync.Mutex
	hl net.Listener // the listener Serve serves (nil = none)
}

// Start opens the engine, allocates the segment and mounts it; the node
// keeps pinging the master (remounting when asked) until Close or Kill. It
// serves no HTTP: Serve does, on a listener the caller owns, and Run does
// both around a context.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Engine.Logger == nil {
		cfg.Engine.Logger = cfg.Logger
	}
	n := &Node{size: cfg.SegmentSize, log: cfg.Logger}
	scfg := store.Config{Master: cfg.Master, Secret: cfg.Secret, Token: cfg.Token, TenantID: cfg.TenantID, TLS: cfg.TLS, SegmentSize: cfg.SegmentSize,
		LocalBufferSize: 64 << 10, PingInterval: cfg.PingInterval, RPCTimeout: cfg.RPCTimeout, UnmountGrace: cfg.UnmountGrace, Logger: cfg.Logger}
	eng, err := transfer.Open(ctx, cfg.Engine)
	if err != nil {
		return nil, fmt.Errorf("storenode: open transfer engine: %w", err)
	}
	if cfg.EnableOffload {
		if err := n.startDisk(cfg, eng.Name()); err != nil {
			eng.Close()
			return nil, err
		}
		scfg.Disk = n.disk
	}
	scfg.Mover = eng
	if v := cfg.Engine.Grants; v != nil { // a master with grants asks the segment's proof of mount
		scfg.MountProof = func(clientID, endpoint string, base, size uint64) ([]byte, error) {
			return v.Keys().MountProof(clientID, endpoint, base, size, time.Now())
		}
	}
	cl, err := store.New(ctx, scfg)
	if err != nil {
		eng.Close()
		n.stopDisk()
		return nil, fmt.Errorf("storenode: %w", err)
	}
	n.eng, n.client = eng, cl
	cfg.Logger.Info("storage node mounted", "segment", cl.SegmentName(), "size", cfg.SegmentSize, "master", cfg.Master,
		"disk", cfg.RootFSDir, "restored", cl.Restored())
	return n, nil
}

// Serve serves /health and /metrics (Handler) on ln until ctx ends, then
// closes ln and returns nil (or the serve error that stopped it first).
func (n *Node) Serve(ctx context.Context, ln net.Listener) error {
	n.mu.Lock()
	n.hl = ln
	n.mu.Unlock()
	if err := httpserve.Serve(ctx, ln, n.Handler(), time.Second); err != nil {
		return fmt.Errorf("storenode: http: %w", err)
	}
	return nil
}

// HTTPAddr is the address Serve listens on ("" when not serving HTTP).
func (n *Node) HTTPAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return httpserve.Addr(n.hl)
}

// unhealthyPings is the number of consecutive failed pings after which
// /health reports the node unhealthy (the master will drop it soon).
const unhealthyPings = 3

// Handler serves GET /health (503 once the master stopped answering
// pings) and GET /metrics (Prometheus text format).
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if h := n.client.Health(); h.PingFailures >= unhealthyPings {
			http.Error(w, fmt.Sprintf("master unreachable: %d failed pings", h.PingFailures), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "OK")
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		h := n.client.Health()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		seg := n.Name()
		fmt.Fprintf(w, "# HELP mooncake_storenode_segment_bytes Memory contributed to the pool.\n# TYPE mooncake_storenode_segment_bytes gauge\nmooncake_storenode_segment_bytes{segment=%q} %d\n", seg, n.size)
		fmt.Fprintf(w, "# HELP mooncake_storenode_remounts_total Remounts after a master restart.\n# TYPE mooncake_storenode_remounts_total counter\nmooncake_storenode_remounts_total{segment=%q} %d\n", seg, h.Remounts)
		pending := 0
		if h.RemountPending {
			pending = 1
		}
		fmt.Fprintf(w, "# HELP mooncake_storenode_remount_pending 1 while a failed remount waits for its retry (the master may not know all the node's objects).\n# TYPE mooncake_storenode_remount_pending gauge\nmooncake_storenode_remount_pending{segment=%q} %d\n", seg, pending)
		fmt.Fprintf(w, "# HELP mooncake_storenode_ping_failures Consecutive failed pings to the master.\n# TYPE mooncake_storenode_ping_failures gauge\nmooncake_storenode_ping_failures{segment=%q} %d\n", seg, h.PingFailures)
		if g := n.eng.GrantStats(); g != (grant.Stats{}) {
			fmt.Fprintf(w, "# HELP mooncake_storenode_grants_verified_total Data-path grants that verified.\n# TYPE mooncake_storenode_grants_verified_total counter\nmooncake_storenode_grants_verified_total{segment=%q} %d\n", seg, g.Verified)
			fmt.Fprintf(w, "# HELP mooncake_storenode_grants_refused_total Data-path grants refused (forged, expired, unknown key, other segment, revoked).\n# TYPE mooncake_storenode_grants_refused_total counter\nmooncake_storenode_grants_refused_total{segment=%q} %d\n", seg, g.Refused)
			fmt.Fprintf(w, "# HELP mooncake_storenode_transfers_denied_total Incoming READs and WRITEs no valid grant covered (nothing touched).\n# TYPE mooncake_storenode_transfers_denied_total counter\nmooncake_storenode_transfers_denied_total{segment=%q} %d\n", seg, g.Denied)
		}
		if n.disk != nil {
			used, objects, reads := n.disk.Usage()
			fmt.Fprintf(w, "# HELP mooncake_storenode_disk_bytes Bytes held by the disk tier.\n# TYPE mooncake_storenode_disk_bytes gauge\nmooncake_storenode_disk_bytes{segment=%q} %d\n", seg, used)
			fmt.Fprintf(w, "# HELP mooncake_storenode_disk_capacity_bytes Capacity of the disk tier.\n# TYPE mooncake_storenode_disk_capacity_bytes gauge\nmooncake_storenode_disk_capacity_bytes{segment=%q} %d\n", seg, n.disk.Capacity())
			fmt.Fprintf(w, "# HELP mooncake_storenode_disk_objects Objects held by the disk tier.\n# TYPE mooncake_storenode_disk_objects gauge\nmooncake_storenode_disk_objects{segment=%q} %d\n", seg, objects)
			fmt.Fprintf(w, "# HELP mooncake_storenode_disk_reads_total Reads served from the disk tier.\n# TYPE mooncake_storenode_disk_reads_total counter\nmooncake_storenode_disk_reads_total{segment=%q} %d\n", seg, reads)
			io := n.disk.IOStats()
			fmt.Fprintf(w, "# HELP mooncake_storenode_disk_read_bytes_total Bytes the disk tier read for the transfer engine's lanes.\n# TYPE mooncake_storenode_disk_read_bytes_total counter\nmooncake_storenode_disk_read_bytes_total{segment=%q} %d\n", seg, io.ReadBytes)
			fmt.Fprintf(w, "# HELP mooncake_storenode_disk_write_bytes_total Bytes the disk tier wrote (offloads).\n# TYPE mooncake_storenode_disk_write_bytes_total counter\nmooncake_storenode_disk_write_bytes_total{segment=%q} %d\n", seg, io.WriteBytes)
		}
		fmt.Fprintf(w, "# HELP mooncake_storenode_seconds_since_ping Seconds since the master last answered.\n# TYPE mooncake_storenode_seconds_since_ping gauge\nmooncake_storenode_seconds_since_ping{segment=%q} %.3f\n", seg, time.Since(h.LastPingOK).Seconds())
	})
	return mux
}

// Name is the node's segment (and transfer engine) name.
func (n *Node) Name() string { return n.client.SegmentName() }

// Client is the node's store client (its segment, remount counter).
func (n *Node) Client() *store.Client { return n.client }

// Close unmounts gracefully, frees the segment and closes the engine.
func (n *Node) Close() error {
	n.log.Info("storage node stopping: unmounting", "segment", n.Name())
	n.client.Close()
	n.stopDisk()
	err := n.eng.Close()
	n.log.Info("storage node stopped", "segment", n.Name(), "err", err)
	return err
}

// Kill stops the node as a crash would: the engine stops serving and the
// node stops pinging without unmounting (tests).
func (n *Node) Kill() error {
	n.client.Abort()
	n.stopDisk()
	return n.eng.Close()
}

// startDisk opens the disk tier and serves its reads on DiskAddr.
func (n *Node) startDisk(cfg Config, engine string) error {
	addr := cfg.DiskAddr
	if addr == "" {
		host := cfg.Engine.LocalHostname
		if host == "" {
			host = "127.0.0.1"
		}
		addr = net.JoinHostPort(host, "0")
	}
	dc := disktier.Config{Dir: cfg.RootFSDir, Capacity: cfg.DiskCapacity, OffloadOnEvict: cfg.OffloadOnEvict, PromotionOnHit: cfg.PromotionOnHit}
	if v := cfg.Engine.Grants; v != nil {
		// HTTP reads need the grant an engine read needs (the master signs
		// disk copies' grants for the node's engine).
		dc.Authorize = func(g []byte, addr, size uint64) bool { return v.Check(g, engine, grant.Read, addr, size) == nil }
	}
	d, err := disktier.Listen(dc, addr)
	if err != nil {
		return fmt.Errorf("storenode: disk tier: %w", err)
	}
	n.disk = d
	return nil
}

func (n *Node) stopDisk() {
	if n.disk != nil {
		_ = n.disk.Close()
	}
}

// DiskTier is the node's disk tier (nil when it has none).
func (n *Node) DiskTier() *disktier.Tier {
	if n.disk == nil {
		return nil
	}
	return n.disk.Tier
}

// DiskURL is the base URL of the node's disk tier ("" when it has none).
func (n *Node) DiskURL() string {
	if n.disk == nil {
		return ""
	}
	return n.disk.URL()
}

// Run listens on cfg.HTTPAddr (unless empty), starts a node, serves its
// HTTP API and keeps it mounted until ctx ends, then stops the HTTP server
// and closes the node. ready, if not nil, is called with the node once it is
// mounted and its HTTP listener bound.
func Run(ctx context.Context, cfg Config, ready func(*Node)) error {
	var ln net.Listener
	if cfg.HTTPAddr != "" {
		var err error
		if ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("storenode: listen %s: %w", cfg.HTTPAddr, err)
		}
	}
	n, err := Start(ctx, cfg)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return err
	}
	if ln == nil {
		if ready != nil {
			ready(n)
		}
		<-ctx.Done()
		return n.Close()
	}
	n.mu.Lock()
	n.hl = ln // HTTPAddr is known before ready runs
	n.mu.Unlock()
	serveErr := make(chan error, 1)
	go func() { serveErr <- n.Serve(ctx, ln) }()
	if ready != nil {
		ready(n)
	}
	err = <-serveErr // ctx ended, or the HTTP server failed
	return errors.Join(err, n.Close())
}
