package pdconnector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
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
	errBadParams    = errors.New("pdconnector: kv_transfer_params with do_remote_prefill need transfer_id and remote_bootstrap_addr")
)

// Config configures a Connector. Zero fields take the defaults listed.
type Config struct {
	// Role is producer (prefill), consumer (decode) or both (default both).
	Role string
	// Transfer moves the blocks; required. The connector does not close it.
	Transfer *transfer.Engine
	// EngineID names this engine in the bootstrap registry (default: a uuid).
	EngineID string
	// BootstrapHost and BootstrapPort: where the producer's bootstrap
	// registry listens (host default 127.0.0.1; port 0 picks a free one;
	// `mooncake serve` defaults to bootstrap.DefaultPort, 8998). A consumer
	// listens only if BootstrapPort > 0 (for /metrics).
	BootstrapHost string
	BootstrapPort int
	// AbortTimeout: the producer frees a finished prefill's blocks when no
	// pull came within it (default 480s).
	AbortTimeout time.Duration
	// PullTimeout bounds a consumer's whole pull, from asking to the last
	// byte (default 30s). Prefill answers and stops writing before it.
	PullTimeout time.Duration
	// FailurePolicy is the engine's kv load failure policy (recompute or
	// fail, default recompute), only used to report what happened.
	FailurePolicy string
	// Now is the clock (default time.Now).
	Now func() time.Time
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
	if c.BootstrapHost == "" {
		c.BootstrapHost = "127.0.0.1"
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
	if c.Now == nil {
		c.Now = time.Now
	}
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
	if c.BootstrapPort < 0 || c.BootstrapPort > 65535 {
		return fmt.Errorf("%w: bootstrap port %d", ErrConfig, c.BootstrapPort)
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
// compatibility (model, dtype, layers, KV heads, head size, block size) and
// the pull protocol version.
func CompatHash(c kvcache.Compat) string {
	return c.Hash() + "-p" + strconv.Itoa(bootstrap.ProtocolVersion)
}

// Connector is the Mooncake P/D connector: it implements engine.Connector
// and, on a producer, bootstrap.Handler.
type Connector struct {
	cfg  Config
	te   *transfer.Engine
	log  *slog.Logger
	boot bootstrap.Client

	ln       net.Listener
	registry *bootstrap.Registry
	bootAddr string

	// set by RegisterKVCaches
	layout     kvcache.Layout
	compat     string
	localBases []uintptr
	bases      []uint64

	mu             sync.Mutex
	prod           *ProducerCore
	cons           *ConsumerCore
	pushCancel     map[string]context.CancelFunc
	meta           []PullSpec
	pendingInvalid []int
	peers          map[string]bootstrap.QueryResponse // bootstrap addr -> registry
	mapped         map[string]bool                    // decode segments pre-mapped (mapPeer)

	managedMu sync.Mutex
	managed   map[uintptr]bool

	m *metrics

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var (
	_ engine.Connector  = (*Connector)(nil)
	_ bootstrap.Handler = (*Connector)(nil)
)

// New builds a connector. A producer (or both) starts its bootstrap
// registry at once; /query answers 503 until the engine registers its KV
// caches (engine.New does). Close it after the engine stopped.
func New(cfg Config) (*Connector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Connector{cfg: cfg, te: cfg.Transfer, log: cfg.Logger, pushCancel: map[string]context.CancelFunc{},
		peers: map[string]bootstrap.QueryResponse{}, managed: map[uintptr]bool{}, mapped: map[string]bool{},
		prod: NewProducerCore(cfg.AbortTimeout)}
	c.boot.HTTP = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.m = newMetrics(c)
	if cfg.Role != RoleConsumer || cfg.BootstrapPort > 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(cfg.BootstrapHost, strconv.Itoa(cfg.BootstrapPort)))
		if err != nil {
			c.cancel()
			return nil, fmt.Errorf("pdconnector: bootstrap listen: %w", err)
		}
		c.ln = ln
		c.bootAddr = ln.Addr().String()
		srv := &bootstrap.Server{Metrics: promhttp.HandlerFor(c.m.reg, promhttp.HandlerOpts{}), Logger: c.log}
		if cfg.Role != RoleConsumer {
			srv.Handler = c
		}
		c.registry = bootstrap.NewRegistry(cfg.EngineID, "", 1)
		srv.Registry = c.registry
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if err := srv.Serve(c.ctx, ln); err != nil && c.ctx.Err() == nil {
				c.log.Error("bootstrap server stopped", "err", err)
			}
		}()
	}
	return c, nil
}

// BootstrapAddr is the host:port of the bootstrap registry ("" if none).
func (c *Connector) BootstrapAddr() string { return c.bootAddr }

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

// Close stops the bootstrap server and waits for every pull, push and
// release in flight (each bounded by its timeout; in-flight transfers are
// cancelled).
func (c *Connector) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}

// Stats is a snapshot of the connector's state, for tests and leak checks.
type Stats struct {
	Held          int // producer: finished prefills whose blocks are held
	PullsInFlight int // consumer
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
	s := Stats{Held: c.prod.Held(), FreedDone: c.prod.Freed(FreeDone), FreedReleased: c.prod.Freed(FreeReleased),
		FreedTimeout: c.prod.Freed(FreeTimeout)}
	if c.cons != nil {
		s.PullsInFlight = c.cons.InFlight()
		s.PullsOK, s.PullsFailed = c.cons.Count("ok"), c.cons.Count("failed")
		s.PullsAborted, s.FullHits = c.cons.Count("aborted"), c.cons.Count("full_hit")
	}
	return s
}

// ---- engine.WorkerConnector ----

// RegisterKVCaches registers the KV regions with the transfer engine and
// the worker with the bootstrap registry.
func (c *Connector) RegisterKVCaches(kv engine.KVCaches) error {
	var local []uintptr
	var bases []uint64
	for _, l := range kv.Layers {
		addr := transfer.AddrOf(l)
		c.managedMu.Lock()
		managed := c.managed[addr]
		c.managedMu.Unlock()
		if !managed {
			if err := c.te.RegisterBytes(l, "cpu:kv"); err != nil {
				return fmt.Errorf("pdconnector: register kv layer: %w", err)
			}
		}
		local = append(local, addr)
		bases = append(bases, uint64(addr))
	}
	// The bootstrap server may already serve pulls: publish under the lock.
	c.mu.Lock()
	c.layout, c.compat, c.localBases, c.bases = kv.Layout, CompatHash(kv.Compat), local, bases
	c.cons = NewConsumerCore(kv.Layout.BlockSize, c.cfg.FailurePolicy == engine.PolicyRecompute)
	c.mu.Unlock()
	if c.registry != nil {
		c.registry.SetCompatHash(c.compat)
		return c.registry.Register(bootstrap.RegisterRequest{EngineID: c.cfg.EngineID,
			Worker: bootstrap.Worker{Addr: c.te.Name()}})
	}
	return nil
}

// BindConnectorMeta implements engine.WorkerConnector.
func (c *Connector) BindConnectorMeta(meta any) {
	c.meta, _ = meta.([]PullSpec)
}

// StartLoadKV starts this step's pulls, each in its own goroutine.
func (c *Connector) StartLoadKV(ctx context.Context) error {
	for _, p := range c.meta {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.runPull(p)
		}()
	}
	return nil
}

// WaitForLayerLoad implements engine.WorkerConnector: loads are whole-request
// and asynchronous, so nothing waits per layer.
func (c *Connector) WaitForLayerLoad(context.Context, int) error { return nil }

// SaveKVLayer implements engine.WorkerConnector: prefill pushes on demand.
func (c *Connector) SaveKVLayer(context.Context, int) error { return nil }

// WaitForSave implements engine.WorkerConnector.
func (c *Connector) WaitForSave(context.Context) error { return nil }

// GetFinished reports finished sends (prefill blocks freed, decode aborted
// pulls stopped) and receives (pulls ended); it also runs the producer's
// timeouts.
func (c *Connector) GetFinished([]string) (doneSending, doneRecving []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.prod.Tick(c.cfg.Now()); n > 0 {
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
func (c *Connector) ClearConnectorMeta() { c.meta = nil }

// ---- engine.SchedulerConnector ----

// GetNumNewMatchedTokens implements engine.SchedulerConnector.
func (c *Connector) GetNumNewMatchedTokens(req *engine.ReqState, numLocal int) (int, bool, error) {
	if c.cfg.Role == RoleProducer {
		return 0, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cons.Match(req.ID(), req.KVTransferParams(), len(req.PromptTokens()), numLocal)
}

// UpdateStateAfterAlloc implements engine.SchedulerConnector.
func (c *Connector) UpdateStateAfterAlloc(req *engine.ReqState, blockIDs []int, n int) {
	if c.cfg.Role == RoleProducer {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cons.AfterAlloc(req.ID(), req.KVTransferParams(), len(req.PromptTokens()), req.NumComputedTokens(), blockIDs, n)
}

// BuildConnectorMeta hands this step's new pulls to the worker half and
// sends the step's will-not-pull releases.
func (c *Connector) BuildConnectorMeta(*engine.SchedulerOutput) any {
	if c.cfg.Role == RoleProducer {
		return nil
	}
	c.mu.Lock()
	pulls, rels := c.cons.TakeWork()
	c.mu.Unlock()
	for _, r := range rels {
		c.sendRelease(r)
	}
	return pulls
}

// UpdateConnectorOutput implements engine.SchedulerConnector.
func (c *Connector) UpdateConnectorOutput(engine.ConnectorOutput) {}

// RequestFinished holds a prefill's blocks for decode's pull (producer) or
// keeps a decode request's blocks while a pull may still write into them
// (consumer), and returns what happened as kv_transfer_params.
func (c *Connector) RequestFinished(req *engine.ReqState, blockIDs []int) (bool, map[string]any) {
	params := req.KVTransferParams()
	if c.cfg.Role != RoleConsumer {
		if v, _ := params["do_remote_decode"].(bool); v {
			tid, _ := params["transfer_id"].(string)
			if tid == "" {
				return false, nil
			}
			ok := req.NumComputedTokens() >= len(req.PromptTokens())
			c.mu.Lock()
			delay := c.prod.Finished(tid, req.ID(), blockIDs, len(req.PromptTokens()), ok, c.cfg.Now())
			c.mu.Unlock()
			return delay, map[string]any{"transfer_id": tid, "remote_engine_id": c.cfg.EngineID,
				"remote_bootstrap_addr": c.bootAddr, "do_remote_prefill": true}
		}
	}
	if c.cfg.Role == RoleProducer {
		return false, nil
	}
	c.mu.Lock()
	delay, rel, out := c.cons.Finished(req.ID(), params)
	c.mu.Unlock()
	if rel != nil {
		c.sendRelease(*rel)
	}
	if load, ok := out["kv_load"].(string); ok {
		c.m.loads.WithLabelValues(load).Inc()
	}
	return delay, out
}
