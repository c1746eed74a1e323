package cli

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/evict"
	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/tenant"
)

func newMasterCmd() *cobra.Command {
	d := masterserver.DefaultServerConfig()
	var (
		host           string
		port, httpPort int
		strategy       string
		secret         string
		grantKeyFile   string
		evictPolicy    string
		verbose        bool
		ha             haFlags
		events         masterEventFlags
		security       masterSecurityFlags
		maxMemory      maxMemoryFlag
		gflags         masterGflags
		scrub          bool
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
also answers /role and /leader.

The master's Go GC lets about 16 MiB of garbage, or 5% of the live heap
when that is more, gather between collections (GOGC from 100 for a small
master down to 5 for a large one) unless the environment sets GOGC; a
GOMEMLIMIT in the environment applies too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			gcCtx, stopGC := context.WithCancel(cmp.Or(cmd.Context(), context.Background()))
			defer stopGC()
			go tuneMasterGC(gcCtx, os.Getenv("GOGC"))
			if err := gflags.apply(cmd.ErrOrStderr(), &verbose, &events, &security); err != nil {
				return err
			}
			cfg.Addr = net.JoinHostPort(host, strconv.Itoa(port))
			cfg.HTTPAddr = ""
			if httpPort >= 0 {
				cfg.HTTPAddr = net.JoinHostPort(host, strconv.Itoa(httpPort))
			}
			cfg.Core.Strategy = master.Strategy(strategy)
			cfg.Secret = secretOr(secret)
			keys, err := grantKeys(grantKeyFile)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			cfg.Grants, cfg.NoScrub = keys, !scrub
			cfg.Core.EvictionPolicy = evict.Kind(evictPolicy)
			cfg.Logger = cmdLogger(cmd, verbose)
			if err := maxMemory.apply(&cfg.Core); err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			if err := cfg.Validate(); err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			stopSecurity, err := security.apply(cmd.Context(), &cfg, cfg.Logger)
			if err != nil {
				return err
			}
			defer stopSecurity()
			ctx, eventsAddr, stopEvents, err := events.start(cmd.Context(), &cfg)
			if err != nil {
				return err
			}
			defer stopEvents()
			metaAddr, stopMeta, err := gflags.startMetadata(ctx, cfg.Logger)
			if err != nil {
				return err
			}
			defer stopMeta()
			eventsAddr += metaAddr
			cmd.SetContext(ctx)
			if ha.enabled {
				return runHAMaster(cmd, cfg, ha)
			}
			s, err := masterserver.NewServer(cfg)
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
			fmt.Fprintf(cmd.OutOrStdout(), "master listening grpc=%s http=%s%s\n", gl.Addr(), httpAddr, eventsAddr)
			return s.Run(ctx, gl, hl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&host, "host", "127.0.0.1", "address to listen on (0.0.0.0: every interface, to serve other hosts)")
	f.IntVar(&port, "port", 50051, "gRPC port (0 = pick a free port)")
	f.IntVar(&httpPort, "http-port", 9003, "admin HTTP port (0 = pick, -1 = disabled)")
	f.StringVar(&strategy, "strategy", string(d.Core.Strategy), "allocation strategy: random, free_ratio_first, local_first")
	f.DurationVar(&cfg.Core.LeaseTTL, "lease-ttl", d.Core.LeaseTTL, "read lease granted by a get")
	f.DurationVar(&cfg.Core.ClientTTL, "client-ttl", d.Core.ClientTTL, "a client silent this long is dropped and its segments unmounted")
	f.DurationVar(&cfg.Core.PutTimeout, "put-timeout", d.Core.PutTimeout, "an unfinished put older than this may be preempted")
	f.DurationVar(&cfg.Core.PutReleaseTimeout, "put-release-timeout", d.Core.PutReleaseTimeout, "the space of an unfinished put is released after this")
	f.Float64Var(&cfg.Core.HighWatermark, "eviction-high-watermark", d.Core.HighWatermark, "evict when used/capacity passes this ratio")
	f.Float64Var(&cfg.Core.EvictionRatio, "eviction-ratio", d.Core.EvictionRatio, "fraction of capacity one eviction frees")
	f.StringVar(&evictPolicy, "eviction-policy", string(d.Core.EvictionPolicy), "order of eviction: lru, tail-first (KV block chains of the store connector from their tails, then LRU) or retention (as tail-first in the store)")
	f.BoolVar(&cfg.Core.Durable, "durable-metadata", true, "objects survive a master restart or failover: nodes re-report the objects their memory holds when they remount (false: a new master starts empty, as Mooncake's)")
	f.DurationVar(&cfg.TickInterval, "tick", 10*time.Millisecond, "period of liveness, timeout and eviction checks")
	f.BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	f.StringVar(&secret, "secret", "", "cluster secret (default $MOONCAKE_SECRET): when set, remove all, remove by regex and unmount (gRPC) and every non-GET admin HTTP call need \"authorization: Bearer <secret>\"; reads stay open")
	f.StringVar(&grantKeyFile, "grant-key-file", "", grantKeyUsage)
	f.BoolVar(&scrub, "scrub-freed", true, "with --grant-key-file and tenants: a freed extent goes to another tenant only once its storage node zeroed it, so no granted read returns what another tenant's removed or evicted object left (false: at once)")
	registerMooncakeMasterFlags(f, &cfg.Core)
	gflags.register(f, &host, &port, &httpPort, &strategy, &cfg.Core, &ha)
	maxMemory.register(f)
	ha.register(f)
	events.register(f)
	security.register(f)
	return cmd
}

// The master's heap is almost all live metadata (about 145 bytes per
// object), in a few large blocks without pointers (internal/master's object
// table), so a collection's cost hardly grows with the objects while the
// Go runtime lets the heap grow to (1+GOGC/100) times the live heap between
// collections. The master's GOGC is therefore set from the live heap so that
// about masterGCHeadroom of garbage gathers between collections, but at
// least masterGCMin percent of the live heap: at 10M objects a loaded
// master's RSS is about 1.05x its live heap. A small master (a few MiB
// live) gets the same headroom, up to masterGCMax: its put path makes
// about a kilobyte of garbage per call, so with the runtime's default
// (GOGC 100 of a 5 MiB heap) a master serving 100k calls a second
// collected 20-30 times a second, each collection running mark workers on
// the idle cores and slowing the calls it overlaps. See docs/store.md,
// "Master memory per object".
//
// While a restore runs (master.RestoreRunning: a restarted master or a new
// leader learning its objects from the nodes), GOGC is at least
// masterGCRestore: each report decoded is a few hundred bytes of garbage,
// and with 16 MiB between collections a restore of millions of objects
// spent as much CPU collecting as deciding. The heap may then grow by a
// quarter of the live heap for the restore's duration.
const (
	masterGCHeadroom = 16 << 20
	masterGCMin      = 5
	masterGCMax      = 1600 // 16 MiB of headroom from 1 MiB live
	masterGCRestore  = 25
	masterGCUnknown  = 100 // before the first collection measured the live heap
)

// masterGCPercent is the GOGC for a live heap of live bytes.
func masterGCPercent(live uint64, restoring bool) int {
	p := masterGCMin
	if restoring {
		p = masterGCRestore
	}
	if live == 0 {
		return masterGCUnknown
	}
	return int(min(masterGCMax, max(uint64(p), 100*masterGCHeadroom/live)))
}

// masterGCTick is how often the tuner reads the live heap (a cheap runtime
// metric) and whether a restore runs; it sets GOGC only when it changes.
const masterGCTick = 250 * time.Millisecond

// tuneMasterGC sets the GOGC of masterGCPercent every masterGCTick until ctx
// ends, unless gogc (the GOGC environment variable) is set: a set GOGC (or
// GOMEMLIMIT, read by the runtime) wins.
func tuneMasterGC(ctx context.Context, gogc string) {
	if gogc != "" {
		return
	}
	if ctx == nil {
		ctx = context.Background()
	}
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	tick := time.NewTicker(masterGCTick)
	defer tick.Stop()
	for last := 0; ; {
		metrics.Read(live)
		if p := masterGCPercent(live[0].Value.Uint64(), master.RestoreRunning(time.Now())); p != last {
			debug.SetGCPercent(p)
			last = p
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// masterEventFlags turn on the master's KV events (Mooncake's
// enable_kv_events): objects stored in and removed from each tier, published
// in vLLM's KV event format (internal/kvevents) so a conductor sees the pool.
type masterEventFlags struct {
	endpoint, replay, topic string
	// standard: Mooncake's form (--enable_kv_events): Standard events,
	// an empty topic frame (kvevents.StandardConfig); nil: vLLM's.
	standard *kvevents.StandardConfig
}

func (e *masterEventFlags) register(f interface {
	StringVar(p *string, name, value, usage string)
}) {
	f.StringVar(&e.endpoint, "kv-events-endpoint", "", "publish the store's object events (stored/removed per tier: CPU, DISK) in vLLM's KV event format on this ZMQ PUB address, tcp://HOST:PORT (port 0 picks one)")
	f.StringVar(&e.replay, "kv-events-replay-endpoint", "", "KV event replay (ZMQ ROUTER) address, tcp://HOST:PORT")
	f.StringVar(&e.topic, "kv-events-topic", "mooncake-store", "topic frame of every KV event message")
}

// start runs the publisher when an endpoint is set and points the master's
// event sink at it. It returns the context the master must run under (the
// publisher ending, on error, ends it), a suffix for the listening line, and
// a stop function that waits for the publisher.
func (e *masterEventFlags) start(parent context.Context, cfg *masterserver.ServerConfig) (context.Context, string, func(), error) {
	if e.endpoint == "" {
		return parent, "", func() {}, nil
	}
	pc := kvevents.Config{Endpoint: strings.Replace(e.endpoint, "tcp://*:", "tcp://0.0.0.0:", 1),
		ReplayEndpoint: strings.Replace(e.replay, "tcp://*:", "tcp://0.0.0.0:", 1), Topic: e.topic, MapEncoding: true, Logger: cfg.Logger}
	if e.standard != nil { // as Mooncake's master: no topic, [ms, [event maps], 0]
		pc.Topic, pc.MapEncoding, pc.MillisTS = "", false, true
	}
	pub, err := kvevents.NewPublisher(pc)
	if err != nil {
		return nil, "", nil, &ExitError{Code: 2, Err: err}
	}
	ctx, cancel := context.WithCancel(parent)
	done := make(chan error, 1)
	go func() {
		done <- pub.Run(ctx)
		cancel()
	}()
	select {
	case <-pub.Ready():
	case err := <-done:
		cancel()
		return nil, "", nil, fmt.Errorf("master: kv events: %w", err)
	}
	cfg.Core.Events = objectEvents{pub}
	if e.standard != nil {
		cfg.Core.Events = &standardEvents{p: pub, cfg: *e.standard}
	}
	addr, repl := pub.Endpoints()
	suffix := " kv_events=" + addr
	if repl != "" {
		suffix += " kv_events_replay=" + repl
	}
	return ctx, suffix, func() { cancel(); <-done }, nil
}

// standardEvents adapts the publisher to the master's event sink in
// Mooncake's form: one Standard event per object and tier, its key the
// object_key (a tenant's without the namespace, its tenant the tenant_id),
// its seq_hashes the key when it is a hash, medium "cpu" or "disk".
type standardEvents struct {
	p   *kvevents.Publisher
	cfg kvevents.StandardConfig
	ids atomic.Uint64
}

func (e *standardEvents) Stored(key string, t master.Tier)  { e.publish(kvevents.EventStored, key, t) }
func (e *standardEvents) Removed(key string, t master.Tier) { e.publish(kvevents.EventRemoved, key, t) }

func (e *standardEvents) publish(kind, key string, t master.Tier) {
	tn, user := tenant.Split(key)
	if ev, ok := e.cfg.StoreEvent(kind, user, tn, strings.ToLower(string(t)), e.ids.Add(1), time.Now().UnixMilli()); ok {
		e.p.Publish(ev)
	}
}

// objectEvents adapts the publisher to the master's event sink.
type objectEvents struct{ p *kvevents.Publisher }

func (o objectEvents) Stored(key string, t master.Tier)  { o.p.ObjectStored(key, string(t)) }
func (o objectEvents) Removed(key string, t master.Tier) { o.p.ObjectRemoved(key, string(t)) }
