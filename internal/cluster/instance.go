package cluster

import (
	"context"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/grant"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/pdconnector"
	"github.com/kvcache-go/mooncake/internal/server"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
	"github.com/kvcache-go/mooncake/transfer"
)

// InstanceConfig configures one engine instance: model, engine, OpenAI
// server, metrics and KV connector.
type InstanceConfig struct {
	Model     *model.Model
	Tokenizer tokenizer.ByteLevel
	// Role: pdconnector.RoleProducer, RoleConsumer or RoleBoth run the
	// Mooncake P/D connector (unless KVConnector says otherwise); "" or
	// "none" runs a plain engine (role both) without a connector.
	Role string
	// KVConnector, if set, builds the instance's KV connector instead of
	// the one Role implies (it may return nil for none); the engine's role
	// is then Role ("" and "none" are both).
	KVConnector KVConnectorFunc
	// Host to listen on (127.0.0.1); Port 0 picks a free one.
	Host string
	Port int
	// P/D connector: BootstrapPort is where the bootstrap registry listens
	// (a producer: 0 picks a free one; a consumer listens only when > 0);
	// EngineID names the engine in it (a uuid); RPCPort and Transport are
	// the transfer engine's (0 = free, auto).
	BootstrapPort int
	EngineID      string
	RPCPort       int
	Transport     string
	// AbortTimeout and PullTimeout: the P/D connector's (480s, 30s).
	AbortTimeout, PullTimeout time.Duration
	// PDFailurePolicy is what the P/D connector reports a failed pull led
	// to (default FailurePolicy).
	PDFailurePolicy string
	// TP is the engine's tensor-parallel size (1; engine.Config.TP).
	TP int
	// PDWholeRequest makes a producer push each request's KV in one
	// transfer after its prefill instead of layer by layer while it
	// computes (pdconnector.Config.WholeRequest).
	PDWholeRequest bool
	// PDGrants makes a consumer's (or both's) transfer engine refuse every
	// write into its KV cache that is not covered by a one-shot grant the
	// connector minted for a pull (pdconnector.Config.Grants), under a key
	// made at start and never shared.
	PDGrants bool
	// LinkRate limits what the transfer engine sends over TCP to this many
	// bytes per second (transfer.Config.LinkRate; 0 = unlimited).
	LinkRate float64
	// Engine knobs (engine defaults when zero).
	BlockSize, NumBlocks, MaxNumBatchedTokens, MaxNumSeqs, MaxModelLen, MaxWaiting int
	DisablePrefixCaching                                                           bool
	// KVEventsEndpoint, if set, publishes the engine's KV events (vLLM's
	// format, internal/kvevents) on this ZMQ PUB address (tcp://HOST:PORT,
	// port 0 picks one), with a replay ROUTER socket on KVEventsReplay when
	// set; KVEventsTopic is the messages' topic.
	KVEventsEndpoint, KVEventsReplay, KVEventsTopic string
	FailurePolicy                                   string // recompute (default) or fail
	Logger                                          *slog.Logger
}

// KVConnector is an instance's KV connector as the assembler wires it in.
type KVConnector struct {
	Connector engine.Connector
	// Allocator allocates the engine's KV memory (nil: the Go heap).
	Allocator kvcache.Allocator
	// Collectors join the server's /metrics.
	Collectors []prometheus.Collector
	// Run, if set, runs for the instance's lifetime (a side channel) and
	// returns when ctx ends.
	Run func(ctx context.Context) error
	// Close, if set, runs after the engine and Run stopped.
	Close func() error
	// PrepareKV, if set, checks and completes each request's
	// kv_transfer_params in the server (server.Config.PrepareKV).
	PrepareKV func(params map[string]any) (map[string]any, bool, error)
}

// KVConnectorFunc builds the KV connector of an instance whose engine
// listens on host ("" means loopback); it returns nil for none. ctx bounds
// the building only.
type KVConnectorFunc func(ctx context.Context, host string, log *slog.Logger) (*KVConnector, error)

// Instance is a running engine instance.
type Instance struct {
	Role   string
	URL    string // http://host:port
	Engine *engine.Engine
	Server *server.Server
	Conn   *pdconnector.Connector // nil without the P/D connector
	TE     *transfer.Engine       // nil without the P/D connector

	// Events is the KV event publisher (nil unless KVEventsEndpoint).
	Events *kvevents.Publisher

	bootstrap string
	stopEv    context.CancelFunc
	evDone    chan error
	kv        *KVConnector
	stopHTTP  context.CancelFunc
	stopKV    context.CancelFunc
	httpDone  chan struct{}
	httpErr   error
	kvDone    chan error
	closeOnce sync.Once
	closeErr  error
}

// BootstrapAddr is the instance's bootstrap registry address ("" if none).
func (i *Instance) BootstrapAddr() string { return i.bootstrap }

// ProxySpec is the instance as a proxy --prefill/--decode argument (with
// its KV event endpoints for a prefill instance that publishes them).
func (i *Instance) ProxySpec() string {
	if b := i.BootstrapAddr(); b != "" && i.Role != pdconnector.RoleConsumer {
		s := i.URL + ",bootstrap=" + b
		if i.Events != nil {
			pub, replay := i.Events.Endpoints()
			s += ",events=" + pub
			if replay != "" {
				s += ",replay=" + replay
			}
		}
		return s
	}
	return i.URL
}

// Done is closed when the server stopped serving (after Close, or on a
// listener failure).
func (i *Instance) Done() <-chan struct{} { return i.httpDone }

// Validate reports the first problem with c.
func (c InstanceConfig) Validate() error {
	switch {
	case c.Model == nil:
		return errors.New("cluster: InstanceConfig.Model is required")
	case c.Role != "" && c.Role != "none" && c.Role != pdconnector.RoleProducer && c.Role != pdconnector.RoleConsumer && c.Role != pdconnector.RoleBoth:
		return fmt.Errorf("cluster: role %q (want none, producer, consumer or both)", c.Role)
	case c.Port < 0 || c.Port > 65535 || c.BootstrapPort < 0 || c.BootstrapPort > 65535 || c.RPCPort < 0:
		return fmt.Errorf("cluster: port out of range (port %d, bootstrap port %d, rpc port %d)", c.Port, c.BootstrapPort, c.RPCPort)
	case c.BlockSize < 0 || c.NumBlocks < 0 || c.MaxNumBatchedTokens < 0 || c.MaxNumSeqs < 0 || c.MaxModelLen < 0 || c.MaxWaiting < 0 ||
		c.AbortTimeout < 0 || c.PullTimeout < 0:
		return errors.New("cluster: negative size or timeout")
	}
	return c.engineConfig(nil).Validate()
}

// engineConfig is the engine's config on kv (nil: no connector).
func (c InstanceConfig) engineConfig(kv *KVConnector) engine.Config {
	ecfg := engine.Config{Model: c.Model, TP: c.TP, BlockSize: c.BlockSize, NumBlocks: c.NumBlocks,
		MaxNumBatchedTokens: c.MaxNumBatchedTokens, MaxNumSeqs: c.MaxNumSeqs, MaxModelLen: c.MaxModelLen,
		MaxWaiting: c.MaxWaiting, DisablePrefixCaching: c.DisablePrefixCaching,
		KVLoadFailurePolicy: c.FailurePolicy, Role: c.engineRole(), Logger: c.Logger}
	if kv != nil {
		ecfg.Connector, ecfg.Allocator = kv.Connector, kv.Allocator
	}
	return ecfg
}

func (c InstanceConfig) withDefaults() InstanceConfig {
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.FailurePolicy == "" {
		c.FailurePolicy = engine.PolicyRecompute
	}
	if c.PDFailurePolicy == "" {
		c.PDFailurePolicy = c.FailurePolicy
	}
	return c
}

// engineRole is the engine's KV role.
func (c InstanceConfig) engineRole() string {
	if c.Role == "" || c.Role == "none" {
		return engine.RoleBoth
	}
	return c.Role
}

// StartInstance is the one assembler of an engine instance: it builds the
// KV connector (the P/D one, or KVConnector's), the engine, the OpenAI
// server with the connector's metrics, binds Host:Port, and starts serving.
// The instance runs until Close (ctx bounds the start only). On error
// nothing is left running.
func StartInstance(ctx context.Context, cfg InstanceConfig) (inst *Instance, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	inst = &Instance{Role: cfg.Role}
	kv, err := inst.buildConnector(ctx, cfg)
	if err != nil {
		return nil, err
	}
	inst.kv = kv
	defer func() {
		if err != nil {
			inst.closeKV()
		}
	}()
	if err := inst.startEvents(cfg); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			inst.stopEvents()
		}
	}()
	eng, srv, err := buildEngine(cfg, kv, inst.Events)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, err
	}
	inst.Engine, inst.Server, inst.URL = eng, srv, "http://"+ln.Addr().String()
	inst.serve(srv, ln)
	return inst, nil
}

// buildConnector builds the KV connector cfg asks for (nil for none) and
// starts its Run.
func (i *Instance) buildConnector(ctx context.Context, cfg InstanceConfig) (*KVConnector, error) {
	var kv *KVConnector
	var err error
	switch {
	case cfg.KVConnector != nil:
		kv, err = cfg.KVConnector(ctx, cfg.Host, cfg.Logger)
	case cfg.Role != "" && cfg.Role != "none":
		kv, err = i.startPD(ctx, cfg)
	}
	if err != nil || kv == nil {
		return nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	i.stopKV, i.kvDone = cancel, make(chan error, 1)
	if kv.Run == nil {
		i.kvDone <- nil
		return kv, nil
	}
	go func() { i.kvDone <- kv.Run(kctx) }()
	return kv, nil
}

// startPD builds the transfer engine and the Mooncake P/D connector, and
// binds its bootstrap listener (a producer always; a consumer only with a
// BootstrapPort).
func (i *Instance) startPD(ctx context.Context, cfg InstanceConfig) (*KVConnector, error) {
	host := cfg.Host
	if host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	var grants *grant.Verifier
	if cfg.PDGrants && cfg.Role != pdconnector.RoleProducer {
		keys, err := grant.ParseKeys([]byte("1:" + grant.NewKeyHex()))
		if err != nil {
			return nil, fmt.Errorf("cluster: grant key: %w", err)
		}
		grants = grant.NewVerifier(keys, nil)
	}
	te, err := transfer.Open(ctx, transfer.Config{LocalHostname: host, RPCPort: cfg.RPCPort, Transport: cfg.Transport,
		LinkRate: cfg.LinkRate, Logger: cfg.Logger, Grants: grants})
	if err != nil {
		return nil, fmt.Errorf("cluster: transfer engine: %w", err)
	}
	var ln net.Listener
	if cfg.Role != pdconnector.RoleConsumer || cfg.BootstrapPort > 0 {
		if ln, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(cfg.BootstrapPort))); err != nil {
			te.Close()
			return nil, fmt.Errorf("cluster: bootstrap listen: %w", err)
		}
		i.bootstrap = ln.Addr().String()
	}
	conn, err := pdconnector.New(pdconnector.Config{Role: cfg.Role, Transfer: te, EngineID: cfg.EngineID,
		BootstrapAddr: i.bootstrap, AbortTimeout: cfg.AbortTimeout, PullTimeout: cfg.PullTimeout,
		FailurePolicy: cfg.PDFailurePolicy, WholeRequest: cfg.PDWholeRequest, Grants: grants, Logger: cfg.Logger})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		te.Close()
		return nil, err
	}
	cfg.Logger.Info("mooncake connector ready", "role", cfg.Role, "engine_id", conn.EngineID(),
		"bootstrap", i.bootstrap, "transfer_segment", te.Name())
	i.Conn, i.TE = conn, te
	return &KVConnector{Connector: conn, Allocator: conn.Allocator(), Collectors: conn.Collectors(),
		Run:   func(ctx context.Context) error { return conn.Run(ctx, ln) },
		Close: te.Close, PrepareKV: conn.PrepareParams}, nil
}

// buildEngine builds the engine on the connector and its server, with the
// connector's metrics on the server's registry.
func buildEngine(cfg InstanceConfig, kv *KVConnector, ev *kvevents.Publisher) (*engine.Engine, *server.Server, error) {
	ecfg := cfg.engineConfig(kv)
	if ev != nil {
		ecfg.KVEvents = ev
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		return nil, nil, err
	}
	scfg := server.Config{Engine: eng, Tokenizer: cfg.Tokenizer, Logger: cfg.Logger}
	if kv != nil {
		scfg.PrepareKV = kv.PrepareKV
	}
	srv, err := server.New(scfg)
	if err != nil {
		return nil, nil, err
	}
	if kv != nil {
		for _, c := range kv.Collectors {
			if err := srv.Registry().Register(c); err != nil {
				return nil, nil, fmt.Errorf("cluster: KV connector metrics: %w", err)
			}
		}
	}
	return eng, srv, nil
}

// startEvents starts the KV event publisher when cfg asks for one and waits
// until its sockets are bound.
func (i *Instance) startEvents(cfg InstanceConfig) error {
	if cfg.KVEventsEndpoint == "" {
		return nil
	}
	bs := cfg.BlockSize
	if bs == 0 {
		bs = 16
	}
	pub, err := kvevents.NewPublisher(kvevents.Config{Endpoint: cfg.KVEventsEndpoint, ReplayEndpoint: cfg.KVEventsReplay,
		Topic: cfg.KVEventsTopic, BlockSize: bs, MapEncoding: true, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	i.stopEv, i.evDone = cancel, make(chan error, 1)
	go func() { i.evDone <- pub.Run(ctx) }()
	select {
	case <-pub.Ready():
		i.Events = pub
		ep, rep := pub.Endpoints()
		cfg.Logger.Info("publishing KV events", "endpoint", ep, "replay", rep, "topic", cfg.KVEventsTopic)
		return nil
	case err := <-i.evDone:
		cancel()
		i.stopEv = nil
		return fmt.Errorf("cluster: kv events: %w", err)
	}
}

// stopEvents stops the publisher and waits for it.
func (i *Instance) stopEvents() {
	if i.stopEv != nil {
		i.stopEv()
		<-i.evDone
		i.stopEv = nil
	}
}

// serve runs srv on ln until Close.
func (i *Instance) serve(srv *server.Server, ln net.Listener) {
	sctx, cancel := context.WithCancel(context.Background())
	i.stopHTTP, i.httpDone = cancel, make(chan struct{})
	go func() {
		defer close(i.httpDone)
		i.httpErr = srv.Serve(sctx, ln)
	}()
}

// closeKV stops the connector's Run, waits for it, then closes the
// connector.
func (i *Instance) closeKV() error {
	if i.kv == nil {
		return nil
	}
	i.stopKV()
	err := <-i.kvDone
	if i.kv.Close != nil {
		if cerr := i.kv.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// Close stops the server and engine, then the connector (its Run, then its
// Close), and waits for all of them. It returns the server's error, if any;
// later calls return the same.
func (i *Instance) Close() error {
	i.closeOnce.Do(func() {
		if i.stopHTTP != nil {
			i.stopHTTP()
			<-i.httpDone
			i.closeErr = i.httpErr
		}
		i.stopEvents()
		i.closeKV() // as before: the connector's close errors are not the caller's
	})
	return i.closeErr
}
