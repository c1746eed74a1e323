package masterserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/master"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/fastrpc"
	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/httpserve"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"google.golang.org/grpc"
)

// ServerConfig configures the master process: the core plus its two
// listeners and the tick that drives periodic work.
type ServerConfig struct {
	Core         master.Config
	Addr         string        // gRPC listen address (":50051"; port 0 picks one)
	HTTPAddr     string        // admin HTTP listen address (":9003"; "" disables)
	TickInterval time.Duration // how often Tick runs (10ms, as Mooncake's eviction check)
	Clock        clock.Clock   // nil = system clock
	Logger       *slog.Logger
	// Secret, when set, is the cluster secret the calls that change the
	// pool for everyone need (NeedsSecret: remove all, remove by regex,
	// unmount), sent as "authorization: Bearer <secret>" (gRPC metadata,
	// or the HTTP header on the admin API's non-GET requests, answered 401
	// otherwise). Reads stay open.
	Secret string
	// Tenants, when set, turns tenants on (tenants.go): every call needs a
	// credential, keys are scoped to the caller's tenant, and the core
	// enforces the tenants' quotas. The cluster secret is then the admin
	// credential. nil: no tenants (one default tenant, the raw key space).
	Tenants *tenant.Source
	// TLS, when set, serves gRPC and fastrpc over TLS on Addr (the
	// same-host fastrpc socket is not served). nil: plaintext.
	TLS *tls.Config
	// NoLocalSocket: do not serve the same-host fastrpc socket (clients
	// on this host use TCP).
	NoLocalSocket bool
	// Grants, when set, is the key the master signs data-path grants with
	// (grants.go); the storage nodes verify them with the same keys.
	Grants *grant.Keyring
	// NoScrub: with Grants and Tenants, freed extents go back to the
	// allocator at once instead of once their node zeroed them
	// (master.Config.Scrub, on by default with both: without it a tenant's
	// grant for a new object can read what another tenant's removed or
	// evicted object left in its extent). Without tenants every client may
	// read every object anyway, and nothing is scrubbed.
	NoScrub bool
}

// DefaultServerConfig returns the defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{Core: master.DefaultConfig(), Addr: ":50051", HTTPAddr: ":9003", TickInterval: 10 * time.Millisecond}
}

// Validate checks the configuration.
func (c ServerConfig) Validate() error {
	if c.Addr == "" {
		return fmt.Errorf("master: empty gRPC address")
	}
	if c.TickInterval < 0 {
		return fmt.Errorf("master: negative tick interval")
	}
	return c.Core.Validate()
}

// Listen binds the configuration's addresses: the gRPC listener on Addr
// and, when HTTPAddr is set, the admin listener (nil otherwise).
func (c ServerConfig) Listen() (grpcLn, httpLn net.Listener, err error) {
	grpcLn, err = net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("master: listen %s: %w", c.Addr, err)
	}
	if c.HTTPAddr != "" {
		httpLn, err = net.Listen("tcp", c.HTTPAddr)
		if err != nil {
			grpcLn.Close()
			return nil, nil, fmt.Errorf("master: listen %s: %w", c.HTTPAddr, err)
		}
	}
	return grpcLn, httpLn, nil
}

// Server is the master process: the core, its gRPC service and its admin
// HTTP API, and the ticker that drives the core's periodic work. NewServer
// builds one without binding or starting anything; Run serves it on
// listeners the caller owns. Start and Close wrap both for callers that
// want a server running in the background.
type Server struct {
	cfg  ServerConfig
	core *master.Master
	log  *slog.Logger

	mu     sync.Mutex
	gl, hl net.Listener // the listeners Run serves (nil before)

	// Set by Start.
	cancel context.CancelFunc
	done   chan struct{} // closed when the background Run returns
	close  sync.Once
}

// NewServer validates cfg and builds the core. It binds no port and starts
// no goroutine.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TickInterval == 0 {
		cfg.TickInterval = 10 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Core.Logger == nil {
		cfg.Core.Logger = log
	}
	if cfg.Tenants != nil && cfg.Core.Events != nil {
		cfg.Core.Events = rawEvents{cfg.Core.Events, cfg.Tenants}
	}
	if cfg.Grants != nil && cfg.Tenants != nil && !cfg.NoScrub {
		cfg.Core.Scrub = true
	}
	core, err := master.New(cfg.Core, cfg.Clock)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, core: core, log: log}, nil
}

// Run serves the master RPC on grpcLn and, when httpLn is not nil, the
// admin HTTP API (AdminHandler) on it, and runs the core's Tick every
// TickInterval, until ctx ends or a listener fails. It closes both
// listeners and returns once every goroutine it started has stopped: nil
// when ctx ended, otherwise the serve error. A Server is run at most once.
func (s *Server) Run(ctx context.Context, grpcLn, httpLn net.Listener) error {
	s.mu.Lock()
	s.gl, s.hl = grpcLn, httpLn
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	svc := NewService(s.core)
	opts := []grpc.ServerOption{grpc.UnaryInterceptor(secretInterceptor(s.cfg.Secret))}
	var auth *authn
	if s.cfg.Tenants != nil {
		auth = &authn{secret: s.cfg.Secret, src: s.cfg.Tenants, now: clock.Or(s.cfg.Clock).Now}
		opts[0] = grpc.UnaryInterceptor(tenantInterceptor(auth))
		s.core.SetTenantQuotas(newTenantQuotas(s.cfg.Tenants))
	}
	addr := grpcLn.Addr().String()
	if s.cfg.TLS != nil {
		grpcLn = tls.NewListener(grpcLn, s.cfg.TLS)
		opts = append(opts, grpc.Creds(tlsCreds{}))
	}
	opts = append(opts, grpc.ForceServerCodecV2(pb.GRPCCodec())) // a remount's reports by their fast codec
	gs := grpc.NewServer(opts...)
	svc.grants = newGranter(s.cfg.Grants, s.cfg.Clock, s.core.Config().PutTimeout)
	pb.RegisterMasterServiceServer(gs, svc)
	tsvc := NewTaskService(s.core)
	tsvc.grants, tsvc.owns = svc.grants, svc.ownsSegment
	pb.RegisterMasterTasksServer(gs, tsvc)
	// The hot calls also come on fastrpc connections to the same port
	// (data-path calls only: none of them needs the cluster secret).
	mux := fastrpc.NewMux(grpcLn)
	if auth != nil {
		mux.SetAuthenticator(svc.fastAuthenticator(ctx, auth))
	}
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	// Same-host clients reach the fastrpc calls over a unix socket named
	// after the TCP address (half the system-call cost of loopback TCP);
	// when it cannot be bound, they use TCP. A TLS master serves TCP only.
	if s.cfg.TLS != nil || s.cfg.NoLocalSocket {
		s.log.Debug("master: no same-host fastrpc socket", "tls", s.cfg.TLS != nil)
	} else if ll, err := fastrpc.ListenLocal(addr); err == nil {
		lm := fastrpc.NewLocalMux(ll)
		if auth != nil {
			lm.SetAuthenticator(svc.fastAuthenticator(ctx, auth))
		}
		wg.Go(func() {
			if err := lm.Run(ctx, svc.FastHandler(ctx)); err != nil {
				errc <- fmt.Errorf("master: local: %w", err)
				cancel()
			}
		})
	} else {
		s.log.Debug("master: no same-host fastrpc socket", "err", err)
	}
	wg.Go(func() {
		// The mux closes the gRPC listener when ctx ends, possibly before
		// gs.Stop: that is a clean end too.
		if err := gs.Serve(mux.GRPC()); err != nil && !errors.Is(err, grpc.ErrServerStopped) && ctx.Err() == nil {
			errc <- fmt.Errorf("master: grpc serve: %w", err)
			cancel()
		}
	})
	wg.Go(func() {
		if err := mux.Run(ctx, svc.FastHandler(ctx)); err != nil {
			errc <- fmt.Errorf("master: %w", err)
			cancel()
		}
	})
	if httpLn != nil {
		wg.Go(func() {
			if err := httpserve.Serve(ctx, httpLn, s.AdminHTTP(), time.Second); err != nil {
				errc <- fmt.Errorf("master: admin serve: %w", err)
				cancel()
			}
		})
	}
	wg.Go(func() { s.tick(ctx) })
	s.log.Info("master listening", "grpc", addr, "http", s.HTTPAddr(), "tenants", auth != nil, "tls", s.cfg.TLS != nil)
	<-ctx.Done()
	gs.Stop()
	wg.Wait()
	select {
	case err := <-errc:
		s.log.Info("master stopped", "err", err)
		return err
	default:
		st := s.core.Stats()
		s.log.Info("master stopped", "objects", st.Objects, "segments", st.Segments, "clients", st.Clients)
		return nil
	}
}

// tick drives the core's periodic work until ctx ends.
func (s *Server) tick(ctx context.Context) {
	t := time.NewTicker(s.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.core.Tick()
		}
	}
}

// Start listens on cfg.Addr and cfg.HTTPAddr (ServerConfig.Listen) and runs
// a new server in the background until Close.
func Start(cfg ServerConfig) (*Server, error) {
	s, err := NewServer(cfg)
	if err != nil {
		return nil, err
	}
	gl, hl, err := cfg.Listen()
	if err != nil {
		return nil, err
	}
	s.gl, s.hl = gl, hl
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.Run(ctx, gl, hl); err != nil {
			s.log.Error("master stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr is the gRPC listen address ("" before the server runs).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return httpserve.Addr(s.gl)
}

// HTTPAddr is the admin listen address ("" when disabled).
func (s *Server) HTTPAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return httpserve.Addr(s.hl)
}

// AdminHTTP is the admin HTTP API as this server guards it: AdminHandler
// behind RequireSecret, or, with tenants, with the tenants' figures and
// behind the admin role (requireAdmin). HA candidates serve it for their
// term's master.
func (s *Server) AdminHTTP() http.Handler {
	if s.cfg.Tenants != nil {
		a := &authn{secret: s.cfg.Secret, src: s.cfg.Tenants, now: clock.Or(s.cfg.Clock).Now}
		return requireAdmin(a, tenantAdmin(s.cfg.Tenants, s.core, AdminHandler(s.core)))
	}
	return RequireSecret(s.cfg.Secret, noTenantAdmin(AdminHandler(s.core)))
}

// Core is the server's master core.
func (s *Server) Core() *master.Master { return s.core }

// Close stops a server started with Start and waits for its goroutines
// (a no-op for a server driven by Run: cancel Run's context instead).
func (s *Server) Close() error {
	s.close.Do(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
	})
	return nil
}
