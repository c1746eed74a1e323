package pdconnector

import (
	"context"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/grant"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/transfer"
)

// Roles.
const (
	RoleProducer = "producer"
	RoleConsumer = "consumer"
	RoleBoth     = "both"
)

// Errors.
var (
	ErrConfig       = errors.New("pdconnector: invalid config")
	ErrIncompatible = errors.New("pdconnector: incompatible peer")
	errStopped      = errors.New("pdconnector: connector stopped")
)

// Mover is what the connector needs of the transfer engine
// (*transfer.Engine is one).
type Mover interface {
	// Name is the engine's segment name, which decode sends to prefill.
	Name() string
	// RegisterBytes registers KV regions not allocated by AllocateManaged.
	RegisterBytes(b []byte, location string) error
	// AllocateManaged allocates shareable (memfd) KV regions.
	AllocateManaged(length int) ([]byte, error)
	// PreparePeer readies the engine for a decode peer before its push.
	PreparePeer(ctx context.Context, segment string) error
	// OpenSegment resolves a decode peer's segment for the push.
	OpenSegment(ctx context.Context, name string) (transfer.SegmentID, error)
	// Transfer runs one push's writes.
	Transfer(ctx context.Context, reqs []transfer.Request) error
	// FenceFrom ends the data lanes the named engines opened to this one
	// and waits until none applies a byte they sent before the call.
	FenceFrom(ctx context.Context, peers ...string) (int, error)
}

var _ Mover = (*transfer.Engine)(nil)

// Config configures a Connector. Zero fields take the defaults listed.
type Config struct {
	// Role is producer (prefill), consumer (decode) or both (default both).
	Role string
	// Transfer moves the blocks; required. The connector does not close it.
	Transfer Mover
	// EngineID names this engine in the bootstrap registry (default: a uuid).
	EngineID string
	// BootstrapAddr is the host:port decode engines reach this producer's
	// bootstrap registry at: it goes into kv_transfer_params
	// (remote_bootstrap_addr). Required for a producer (or both), unused by
	// a consumer. The connector binds nothing itself: the caller listens
	// (`mooncake serve` on bootstrap.DefaultPort, 8998), puts the address
	// here and passes the listener to Run.
	BootstrapAddr string
	// AbortTimeout: the producer frees a finished prefill's blocks when no
	// pull came within it (default 480s).
	AbortTimeout time.Duration
	// PullTimeout bounds a consumer's whole pull, from asking to the last
	// byte (default 30s). Prefill answers and stops writing before it.
	PullTimeout time.Duration
	// FailurePolicy is the engine's kv load failure policy (recompute or
	// fail, default recompute), only used to report what happened.
	FailurePolicy string
	// WholeRequest makes a producer push a request's KV only once its
	// prefill finished, in one transfer. By default it streams layer by
	// layer: each layer's blocks are written as soon as the layer is
	// computed, while the next layers compute (stream.go).
	WholeRequest bool
	// Grants, for a consumer, is the grant verifier of its transfer engine
	// (the one given to transfer.Config.Grants): each pull then carries a
	// one-shot grant for exactly its destination blocks, released when the
	// pull ends, and the engine refuses every other write (grants.go).
	// Nil: no grants.
	Grants *grant.Verifier
	// Clock is the cores' clock (default the real one).
	Clock clock.Clock
	// Logger (default discard).
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Role == "" {
		c.Role = RoleBoth
	}
	if c.EngineID == "" {
		c.EngineID = "engine-" + uuid.NewString()[:8]
	}
	if c.AbortTimeout == 0 {
		c.AbortTimeout = 480 * time.Second
	}
	if c.PullTimeout == 0 {
		c.PullTimeout = 30 * time.Second
	}
	if c.FailurePolicy == "" {
		c.FailurePolicy = engine.PolicyRecompute
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports the first problem with c (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch c.Role {
	case RoleProducer, RoleConsumer, RoleBoth:
	default:
		return fmt.Errorf("%w: role %q (want producer, consumer or both)", ErrConfig, c.Role)
	}
	if c.Transfer == nil {
		return fmt.Errorf("%w: a transfer engine is required", ErrConfig)
	}
	if c.BootstrapAddr == "" && c.Role != RoleConsumer {
		return fmt.Errorf("%w: a %s needs BootstrapAddr (the host:port decode reaches its bootstrap listener at)", ErrConfig, c.Role)
	}
	if c.BootstrapAddr != "" {
		if _, _, err := net.SplitHostPort(c.BootstrapAddr); err != nil {
			return fmt.Errorf("%w: bootstrap address %q: %v", ErrConfig, c.BootstrapAddr, err)
		}
	}
	if c.AbortTimeout < 0 || c.PullTimeout < 0 {
		return fmt.Errorf("%w: negative timeout", ErrConfig)
	}
	if c.FailurePolicy != engine.PolicyRecompute && c.FailurePolicy != engine.PolicyFail {
		return fmt.Errorf("%w: failure policy %q", ErrConfig, c.FailurePolicy)
	}
	return nil
}

// CompatHash is the handshake's compatibility hash: the engine's KV
// compatibility (model, weights, dtype, layers, KV heads, head size, block
// size; not the TP size, which the pull maps) and the pull protocol version.
func CompatHash(c kvcache.Compat) string {
	return c.Hash() + "-p" + strconv.Itoa(bootstrap.ProtocolVersion)
}

// Connector is the Mooncake P/D connector: it implements engine.Connector
// and, on a producer, bootstrap.Handler.
type Connector struct {
	cfg   Config
	te    Mover
	log   *slog.Logger
	clock clock.Clock
	boot  bootstrap.Client

	registry *bootstrap.Registry
	running  atomic.Bool // Run was called

	// set by RegisterKVCaches
	layout     kvcache.Layout
	compat     string
	localBases [][]uint64 // [rank][layer] of this engine's KV regions
	bases      []uint64   // the same, rank major, as sent in a pull

	hooks hooks // the role's halves (halves.go)

	mu             sync.Mutex
	prod           *ProducerCore
	cons           *ConsumerCore
	pushCancel     map[string]context.CancelFunc
	meta           stepMeta
	pendingInvalid []int
	peers          map[string]bootstrap.QueryResponse // bootstrap addr -> registry
	prepared       map[string]bool                    // decode segments handed to PreparePeer

	managedMu sync.Mutex
	managed   map[uintptr]bool

	m            *metrics
	pushFailed   atomic.Uint64 // pulls answered failed (SGLang's poll state Failed, prefill side)
	streamWrites atomic.Uint64 // layer-wise writes done

	// The goroutines of pulls, pushes and releases (each bounded by a
	// timeout): Run cancels them when its ctx ends and waits for them.
	lifeMu  sync.Mutex
	stopped bool // Run's ctx ended: no new work
	cancels map[uint64]context.CancelFunc
	nextID  uint64
	wg      sync.WaitGroup
}

var (
	_ engine.Connector        = (*Connector)(nil)
	_ engine.FirstTokenSource = (*Connector)(nil)
	_ bootstrap.Handler       = (*Connector)(nil)
)

// New checks cfg and builds a connector. It binds no port and starts no
// goroutine: Run serves the bootstrap registry and owns the connector's
// goroutines. Hooks called before Run work (pulls start at once); /query
// answers 503 until the engine registers its KV caches (engine.New does).
func New(cfg Config) (*Connector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Connector{cfg: cfg, te: cfg.Transfer, log: cfg.Logger, clock: cfg.Clock, pushCancel: map[string]context.CancelFunc{},
		peers: map[string]bootstrap.QueryResponse{}, managed: map[uintptr]bool{}, prepared: map[string]bool{},
		prod: NewProducerCore(cfg.AbortTimeout), cancels: map[uint64]context.CancelFunc{},
		registry: bootstrap.NewRegistry(cfg.EngineID, "", 1)}
	c.hooks = newHooks(c, cfg.Role)
	c.boot.HTTP = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, DialContext: dialAbortive}}
	c.m = newMetrics(c)
	return c, nil
}

// dialAbortive dials the bootstrap side channel with SO_LINGER 0, so that
// closing a connection resets it: a pull decode gave up on (its ctx ended,
// net/http closes the connection) is dropped from the socket instead of
// being delivered when a partition heals, after decode fenced prefill and
// reused the blocks the pull names.
func dialAbortive(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return conn, nil
}

// Run serves the bootstrap registry, the pull side channel (POST /pull and
// /release, producer and both) and /metrics on ln until ctx ends; then it
// cancels the pulls, pushes and releases in flight (a pull being served is
// answered "aborted" at once) and returns once every goroutine of the
// connector has ended. ln may be nil for a consumer that serves nothing (its
// metrics are on the engine's /metrics); a producer needs one. Run closes
// ln. Call it once; stop the engine that calls the hooks before ctx ends
// (hooks after that fail their pulls at once).
func (c *Connector) Run(ctx context.Context, ln net.Listener) error {
	if !c.running.CompareAndSwap(false, true) {
		if ln != nil {
			_ = ln.Close()
		}
		return fmt.Errorf("pdconnector: Run called twice")
	}
	var err error
	switch {
	case ln != nil:
		srv := &bootstrap.Server{Registry: c.registry, Metrics: promhttp.HandlerFor(c.m.reg, promhttp.HandlerOpts{}), Logger: c.log}
		if c.hooks.servesPulls() {
			srv.Handler = c
		}
		if err = srv.Serve(ctx, ln); err != nil {
			err = fmt.Errorf("pdconnector: bootstrap server: %w", err)
		}
	case c.hooks.servesPulls():
		err = fmt.Errorf("%w: a %s needs a bootstrap listener", ErrConfig, c.cfg.Role)
	default:
		<-ctx.Done()
	}
	c.stop()
	return err
}

// stop refuses new work, cancels what is in flight and waits for it.
func (c *Connector) stop() {
	c.lifeMu.Lock()
	c.stopped = true
	for _, cancel := range c.cancels {
		cancel()
	}
	c.lifeMu.Unlock()
	c.wg.Wait()
}

// track makes ctx end when the connector stops, too. ok is false (and ctx
// already cancelled) once the connector stopped; done must be called when
// the work ends.
func (c *Connector) track(ctx context.Context) (_ context.Context, done func(), ok bool) {
	return c.trackWG(ctx, false)
}

// trackWG is track; with wg it also counts the work in c.wg (under the same
// lock as the stopped check, so Run's Wait never races an Add).
func (c *Connector) trackWG(ctx context.Context, wg bool) (_ context.Context, done func(), ok bool) {
	ctx, cancel := context.WithCancel(ctx)
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if c.stopped {
		cancel()
		return ctx, func() {}, false
	}
	id := c.nextID
	c.nextID++
	c.cancels[id] = cancel
	if wg {
		c.wg.Add(1)
	}
	return ctx, func() {
		c.lifeMu.Lock()
		delete(c.cancels, id)
		c.lifeMu.Unlock()
		cancel()
		if wg {
			c.wg.Done()
		}
	}, true
}

// goTracked runs f in a goroutine that Run waits for, with ctx also
// cancelled when the connector stops. It returns false (running nothing)
// once the connector stopped.
func (c *Connector) goTracked(ctx context.Context, f func(context.Context)) bool {
	ctx, done, ok := c.trackWG(ctx, true)
	if !ok {
		return false
	}
	go func() {
		defer done()
		f(ctx)
	}()
	return true
}

// isStopped reports whether Run's ctx ended.
func (c *Connector) isStopped() bool {
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	return c.stopped
}

// BootstrapAddr is the advertised host:port of the bootstrap registry
// (Config.BootstrapAddr; "" for a consumer without one).
func (c *Connector) BootstrapAddr() string { return c.cfg.BootstrapAddr }

// EngineID is this engine's id in the registry.
func (c *Connector) EngineID() string { return c.cfg.EngineID }

// Collectors returns the connector's metrics, to register with the engine
// server's registry (they are also served on the bootstrap port's /metrics).
func (c *Connector) Collectors() []prometheus.Collector { return c.m.all }

// Allocator allocates the engine's KV regions as transfer-engine managed
// (memfd) memory, so that a same-host peer writes with one memcpy.
func (c *Connector) Allocator() kvcache.Allocator {
	return func(size int) ([]byte, error) {
		b, err := c.te.AllocateManaged(size)
		if err != nil {
			return nil, err
		}
		// Fault the pages in now rather than on the first KV write.
		for i := 0; i < len(b); i += 4096 {
			b[i] = 0
		}
		c.managedMu.Lock()
		c.managed[transfer.AddrOf(b)] = true
		c.managedMu.Unlock()
		return b, nil
	}
}

// Stats is a snapshot of the connector's state, for tests and leak checks.
type Stats struct {
	Held          int    // producer: finished prefills whose blocks are held
	Pushing       int    // producer: transfers being written (whole, or streams attached)
	StreamWrites  uint64 // producer: layer-wise writes done (one per batch of queued layers)
	PullsInFlight int    // consumer
	FreedDone     uint64
	FreedReleased uint64
	FreedTimeout  uint64
	PullsOK       uint64
	PullsFailed   uint64
	PullsAborted  uint64
	FullHits      uint64
}

// Stats returns a snapshot.
func (c *Connector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _, pushing := c.prod.Poll()
	s := Stats{Held: c.prod.Held(), Pushing: pushing, StreamWrites: c.streamWrites.Load(), FreedDone: c.prod.Freed(FreeDone), FreedReleased: c.prod.Freed(FreeReleased),
		FreedTimeout: c.prod.Freed(FreeTimeout)}
	if c.cons != nil {
		s.PullsInFlight = c.cons.InFlight()
		s.PullsOK, s.PullsFailed = c.cons.Count("ok"), c.cons.Count("failed")
		s.PullsAborted, s.FullHits = c.cons.Count("aborted"), c.cons.Count("full_hit")
	}
	return s
}

// ---- engine.WorkerConnector ----

// RegisterKVCaches registers the KV regions of every tensor-parallel rank
// with the transfer engine, and one worker per rank (all at this engine's
// segment) with the bootstrap registry, which reports the TP size and the
// KV block layout.
func (c *Connector) RegisterKVCaches(kv engine.KVCaches) error {
	if err := kv.Layout.Validate(); err != nil || len(kv.Ranks) != kv.Layout.TPSize() {
		return fmt.Errorf("pdconnector: %d KV rank regions for layout %+v: %v", len(kv.Ranks), kv.Layout, err)
	}
	var local [][]uint64
	var bases []uint64
	for _, layers := range kv.Ranks {
		var rank []uint64
		for _, l := range layers {
			addr := transfer.AddrOf(l)
			c.managedMu.Lock()
			managed := c.managed[addr]
			c.managedMu.Unlock()
			if !managed {
				if err := c.te.RegisterBytes(l, "cpu:kv"); err != nil {
					return fmt.Errorf("pdconnector: register kv layer: %w", err)
				}
			}
			rank = append(rank, uint64(addr))
			bases = append(bases, uint64(addr))
		}
		local = append(local, rank)
	}
	// The bootstrap server may already serve pulls: publish under the lock.
	c.mu.Lock()
	c.layout, c.compat, c.localBases, c.bases = kv.Layout, CompatHash(kv.Compat), local, bases
	c.cons = NewConsumerCore(kv.Layout.BlockSize, c.cfg.FailurePolicy == engine.PolicyRecompute)
	err := c.hooks.registered(kv.Layout)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.registry.SetCompatHash(c.compat)
	c.registry.SetTP(kv.Layout.TPSize(), kvcache.BlockLayout)
	for r := range kv.Layout.TPSize() {
		if err := c.registry.Register(bootstrap.RegisterRequest{EngineID: c.cfg.EngineID,
			Worker: bootstrap.Worker{TPRank: r, Addr: c.te.Name()}}); err != nil {
			return err
		}
	}
	return nil
}

// BindConnectorMeta implements engine.WorkerConnector.
func (c *Connector) BindConnectorMeta(meta any) {
	switch m := meta.(type) {
	case stepMeta:
		c.meta = m
	case []PullSpec:
		c.meta = stepMeta{pulls: m}
	default:
		c.meta = stepMeta{}
	}
}

// StartLoadKV starts this step's pulls, each in its own goroutine (owned
// by Run). A pull ends when ctx ends, when Run's ctx ends, or after
// PullTimeout. With ctx already done nothing starts and ctx's error is
// returned; after Run ended the pulls fail at once (the failure policy
// applies).
func (c *Connector) StartLoadKV(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, p := range c.meta.pulls {
		if !c.goTracked(ctx, func(ctx context.Context) { c.runPull(ctx, p) }) {
			c.pullDone(p, errStopped, bootstrap.PullResponse{}, 0)
		}
	}
	return nil
}

// WaitForLayerLoad implements engine.WorkerConnector: loads are whole-request
// and asynchronous, so nothing waits per layer.
func (c *Connector) WaitForLayerLoad(context.Context, int) error { return nil }

// SaveKVLayer implements engine.WorkerConnector: layer's KV of this step
// is in the cache; with layer-wise streaming, the layer's newly complete
// blocks of every prefill being pulled are queued for its pusher, which
// writes them while the next layers compute. It never blocks on I/O.
func (c *Connector) SaveKVLayer(_ context.Context, layer int) error {
	if len(c.meta.saves) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tid := range c.meta.saves {
		c.prod.LayerDone(tid, layer)
	}
	return nil
}

// WaitForSave implements engine.WorkerConnector.
func (c *Connector) WaitForSave(context.Context) error { return nil }

// GetFinished reports finished sends (prefill blocks freed, decode aborted
// pulls stopped) and receives (pulls ended); it also runs the producer's
// timeouts.
func (c *Connector) GetFinished([]string) (doneSending, doneRecving []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.prod.Tick(c.clock.Now()); n > 0 {
		c.log.Warn("freed prefill blocks nobody pulled", "count", n, "after", c.cfg.AbortTimeout)
	}
	doneSending = c.prod.DrainDoneSending()
	if c.cons != nil {
		ds, dr, inv := c.cons.Drain()
		doneSending = append(doneSending, ds...)
		doneRecving = dr
		c.pendingInvalid = append(c.pendingInvalid, inv...)
	}
	return doneSending, doneRecving
}

// GetBlockIDsWithLoadErrors implements engine.WorkerConnector.
func (c *Connector) GetBlockIDsWithLoadErrors() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	inv := c.pendingInvalid
	c.pendingInvalid = nil
	return inv
}

// ClearConnectorMeta implements engine.WorkerConnector.
func (c *Connector) ClearConnectorMeta() { c.meta = stepMeta{} }

// ---- engine.SchedulerConnector ----

// GetNumNewMatchedTokens implements engine.SchedulerConnector.
func (c *Connector) GetNumNewMatchedTokens(req *engine.ReqState, numLocal int) (int, bool, error) {
	return c.hooks.match(req, numLocal)
}

// UpdateStateAfterAlloc implements engine.SchedulerConnector.
func (c *Connector) UpdateStateAfterAlloc(req *engine.ReqState, blockIDs []int, n int) {
	c.hooks.afterAlloc(req, blockIDs, n)
}

// BuildConnectorMeta hands this step's new pulls and the prefills it
// streams to the worker half, and sends the step's will-not-pull releases.
func (c *Connector) BuildConnectorMeta(out *engine.SchedulerOutput) any {
	var m stepMeta
	c.hooks.meta(out, &m)
	return m
}

// FirstToken implements engine.FirstTokenSource: the first output token
// prefill shipped with a pulled request's KV (aux data), so decode starts
// from the next position instead of recomputing the last prompt one.
func (c *Connector) FirstToken(req *engine.ReqState) (int, float32, bool) {
	return c.hooks.firstToken(req)
}

// UpdateConnectorOutput implements engine.SchedulerConnector.
func (c *Connector) UpdateConnectorOutput(engine.ConnectorOutput) {}

// PrepareParams is the engine server's kv_transfer_params hook for this
// connector (server.Config.PrepareKV): see the package function. The
// params arrive and leave as the JSON edge's open map.
func (c *Connector) PrepareParams(params map[string]any) (map[string]any, bool, error) {
	return PrepareParams(c.cfg.Role, params)
}

// RequestFinished holds a prefill's blocks for decode's pull (producer) or
// keeps a decode request's blocks while a pull may still write into them
// (consumer), and returns what happened as kv_transfer_params: the typed
// answer of its half, marshalled into the engine's open map.
func (c *Connector) RequestFinished(req *engine.ReqState, blockIDs []int) (bool, map[string]any) {
	_, delay, a := c.hooks.finished(req, blockIDs)
	if a == nil {
		return delay, nil
	}
	return delay, a.wire()
}
