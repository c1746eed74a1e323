package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/pdconnector"
	"github.com/kvcache-go/mooncake/internal/proxy"
	"github.com/kvcache-go/mooncake/internal/server"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
	"github.com/kvcache-go/mooncake/transfer"
)

// InstanceConfig configures one engine instance (engine + OpenAI server +
// P/D connector + transfer engine).
type InstanceConfig struct {
	Model     *model.Model
	Tokenizer tokenizer.ByteLevel
	// Role: pdconnector.RoleProducer, RoleConsumer or RoleBoth; "" or
	// "none" runs a plain engine without a connector (colocated).
	Role string
	// Host to listen on (127.0.0.1); Port 0 picks a free one.
	Host          string
	Port          int
	BootstrapPort int // producer: 0 picks a free one
	// Engine knobs (engine defaults when zero).
	BlockSize, NumBlocks, MaxNumBatchedTokens int
	FailurePolicy                             string // recompute (default) or fail
	AbortTimeout, PullTimeout                 time.Duration
	// Transport of the transfer engine (auto).
	Transport string
	Logger    *slog.Logger
}

// Instance is a running engine instance.
type Instance struct {
	Role   string
	URL    string // http://host:port
	Engine *engine.Engine
	Server *server.Server
	Conn   *pdconnector.Connector // nil without a connector
	TE     *transfer.Engine       // nil without a connector

	cancel context.CancelFunc
	done   chan error
}

// BootstrapAddr is the instance's bootstrap registry address ("" if none).
func (i *Instance) BootstrapAddr() string {
	if i.Conn == nil {
		return ""
	}
	return i.Conn.BootstrapAddr()
}

// ProxySpec is the instance as a proxy --prefill/--decode argument.
func (i *Instance) ProxySpec() string {
	if b := i.BootstrapAddr(); b != "" && i.Role != pdconnector.RoleConsumer {
		return i.URL + ",bootstrap=" + b
	}
	return i.URL
}

// Validate reports the first problem with c.
func (c InstanceConfig) Validate() error {
	switch {
	case c.Model == nil:
		return errors.New("cluster: InstanceConfig.Model is required")
	case c.Role != "" && c.Role != "none" && c.Role != pdconnector.RoleProducer && c.Role != pdconnector.RoleConsumer && c.Role != pdconnector.RoleBoth:
		return fmt.Errorf("cluster: role %q (want none, producer, consumer or both)", c.Role)
	case c.Port < 0 || c.BootstrapPort < 0 || c.BlockSize < 0 || c.NumBlocks < 0 || c.MaxNumBatchedTokens < 0 ||
		c.AbortTimeout < 0 || c.PullTimeout < 0:
		return errors.New("cluster: negative port, size or timeout")
	}
	return nil
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.Model == nil {
		return errors.New("cluster: Config.Model is required")
	}
	if c.Prefill < 0 || c.Decode < 0 || c.ProxyPort < 0 {
		return errors.New("cluster: negative instance count or port")
	}
	return nil
}

// StartInstance builds and starts an instance; it serves until Close.
func StartInstance(ctx context.Context, cfg InstanceConfig) (inst *Instance, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.FailurePolicy == "" {
		cfg.FailurePolicy = engine.PolicyRecompute
	}
	inst = &Instance{Role: cfg.Role, done: make(chan error, 1)}
	ecfg := engine.Config{Model: cfg.Model, BlockSize: cfg.BlockSize, NumBlocks: cfg.NumBlocks,
		MaxNumBatchedTokens: cfg.MaxNumBatchedTokens, KVLoadFailurePolicy: cfg.FailurePolicy, Logger: cfg.Logger}
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	if cfg.Role != "" && cfg.Role != "none" {
		te, err := transfer.Open(ctx, transfer.Config{Transport: cfg.Transport, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("cluster: transfer engine: %w", err)
		}
		cleanup = append(cleanup, func() { te.Close() })
		conn, err := pdconnector.New(pdconnector.Config{Role: cfg.Role, Transfer: te, BootstrapHost: cfg.Host,
			BootstrapPort: cfg.BootstrapPort, AbortTimeout: cfg.AbortTimeout, PullTimeout: cfg.PullTimeout,
			FailurePolicy: cfg.FailurePolicy, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, func() { conn.Close() })
		inst.TE, inst.Conn = te, conn
		ecfg.Connector, ecfg.Allocator, ecfg.Role = conn, conn.Allocator(), cfg.Role
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		return nil, err
	}
	srv, err := server.New(server.Config{Engine: eng, Tokenizer: cfg.Tokenizer, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	if inst.Conn != nil {
		srv.Registry().MustRegister(inst.Conn.Collectors()...)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, err
	}
	inst.Engine, inst.Server, inst.URL = eng, srv, "http://"+ln.Addr().String()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	inst.cancel = cancel
	go func() { inst.done <- srv.Serve(sctx, ln) }()
	return inst, nil
}

// Close stops the server and engine, then the connector and transfer
// engine, and waits for all of them.
func (i *Instance) Close() error {
	if i.cancel == nil {
		return nil
	}
	i.cancel()
	err := <-i.done
	i.done <- err
	i.cancel = nil
	if i.Conn != nil {
		i.Conn.Close()
	}
	if i.TE != nil {
		i.TE.Close()
	}
	return err
}

// Config configures a whole local cluster: a proxy in front of prefill and
// decode instances, all in this process.
type Config struct {
	Model     *model.Model
	Tokenizer tokenizer.ByteLevel
	Host      string
	ProxyPort int
	Prefill   int // instances (default 1)
	Decode    int // instances (default 1)
	// Instance is the template of every instance (Model, Role, Host and
	// ports are filled in).
	Instance InstanceConfig
	// Proxy is the proxy's config (Prefill/Decode are filled in).
	Proxy  proxy.Config
	Logger *slog.Logger
}

// Cluster is a running local cluster.
type Cluster struct {
	Prefill []*Instance
	Decode  []*Instance
	Proxy   *proxy.Proxy
	URL     string // the proxy's base URL

	cancel context.CancelFunc
	done   chan error
}

// Up starts every instance and the proxy, and returns once the proxy sees
// every instance healthy (or ctx ends).
func Up(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Prefill <= 0 {
		cfg.Prefill = 1
	}
	if cfg.Decode <= 0 {
		cfg.Decode = 1
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c = &Cluster{done: make(chan error, 1)}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for i := 0; i < cfg.Prefill+cfg.Decode; i++ {
		ic := cfg.Instance
		ic.Model, ic.Tokenizer, ic.Host, ic.Port = cfg.Model, cfg.Tokenizer, cfg.Host, 0
		ic.Role = pdconnector.RoleProducer
		if i >= cfg.Prefill {
			ic.Role = pdconnector.RoleConsumer
		}
		ic.Logger = cfg.Logger.With("instance", fmt.Sprintf("%s-%d", ic.Role, i))
		inst, err := StartInstance(ctx, ic)
		if err != nil {
			return c, err
		}
		if ic.Role == pdconnector.RoleProducer {
			c.Prefill = append(c.Prefill, inst)
			cfg.Proxy.Prefill = append(cfg.Proxy.Prefill, inst.ProxySpec())
		} else {
			c.Decode = append(c.Decode, inst)
			cfg.Proxy.Decode = append(cfg.Proxy.Decode, inst.ProxySpec())
		}
	}
	if cfg.Proxy.Logger == nil {
		cfg.Proxy.Logger = cfg.Logger.With("component", "proxy")
	}
	if cfg.Proxy.HealthInterval == 0 {
		cfg.Proxy.HealthInterval = 500 * time.Millisecond
	}
	p, err := proxy.New(cfg.Proxy)
	if err != nil {
		return c, err
	}
	c.Proxy = p
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.ProxyPort)))
	if err != nil {
		return c, err
	}
	c.URL = "http://" + ln.Addr().String()
	for !p.Ready() {
		p.CheckNow(ctx)
		if p.Ready() {
			break
		}
		select {
		case <-ctx.Done():
			ln.Close()
			return c, fmt.Errorf("cluster: instances not ready: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.Start()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	go func() { c.done <- p.Serve(sctx, ln) }()
	return c, nil
}

// Close stops the proxy and every instance.
func (c *Cluster) Close() error {
	if c.cancel != nil {
		c.cancel()
		<-c.done
		c.cancel = nil
	}
	if c.Proxy != nil {
		c.Proxy.Close()
	}
	for _, in := range append(append([]*Instance{}, c.Prefill...), c.Decode...) {
		in.Close()
	}
	return nil
}
