package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"google.golang.org/grpc"
)

// ServerConfig configures the master process: the core plus its two
// listeners and the tick that drives periodic work.
type ServerConfig struct {
	Core         Config
	Addr         string        // gRPC listen address (":50051"; port 0 picks one)
	HTTPAddr     string        // admin HTTP listen address (":9003"; "" disables)
	TickInterval time.Duration // how often Tick runs (10ms, as Mooncake's eviction check)
	Clock        Clock         // nil = system clock
	Logger       *slog.Logger
}

// DefaultServerConfig returns the defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{Core: DefaultConfig(), Addr: ":50051", HTTPAddr: ":9003", TickInterval: 10 * time.Millisecond}
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

// Server is a running master: the core, its gRPC service and admin HTTP.
type Server struct {
	cfg   ServerConfig
	core  *Master
	log   *slog.Logger
	grpc  *grpc.Server
	http  *http.Server
	gl    net.Listener
	hl    net.Listener
	stop  chan struct{}
	wg    sync.WaitGroup
	close sync.Once
}

// Start validates cfg, listens and serves until Close.
func Start(cfg ServerConfig) (*Server, error) {
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
	core, err := New(cfg.Core, cfg.Clock)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, core: core, log: log, stop: make(chan struct{})}
	s.gl, err = net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("master: listen %s: %w", cfg.Addr, err)
	}
	if cfg.HTTPAddr != "" {
		s.hl, err = net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			s.gl.Close()
			return nil, fmt.Errorf("master: listen %s: %w", cfg.HTTPAddr, err)
		}
	}
	s.grpc = grpc.NewServer()
	pb.RegisterMasterServiceServer(s.grpc, NewService(core))
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(s.gl); err != nil {
			log.Error("master grpc serve", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(cfg.TickInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				core.Tick()
			}
		}
	}()
	if s.hl != nil {
		s.http = &http.Server{Handler: AdminHandler(core), ReadHeaderTimeout: 5 * time.Second}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.http.Serve(s.hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("master admin serve", "err", err)
			}
		}()
	}
	log.Info("master listening", "grpc", s.gl.Addr().String(), "http", s.HTTPAddr())
	return s, nil
}

// Addr is the gRPC listen address.
func (s *Server) Addr() string { return s.gl.Addr().String() }

// HTTPAddr is the admin listen address ("" when disabled).
func (s *Server) HTTPAddr() string {
	if s.hl == nil {
		return ""
	}
	return s.hl.Addr().String()
}

// Core is the server's master core.
func (s *Server) Core() *Master { return s.core }

// Close stops serving and waits for the server's goroutines.
func (s *Server) Close() error {
	s.close.Do(func() {
		close(s.stop)
		s.grpc.Stop()
		if s.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.http.Shutdown(ctx)
			cancel()
		}
		s.wg.Wait()
	})
	return nil
}

// Run starts a master and serves until ctx ends.
func Run(ctx context.Context, cfg ServerConfig) error {
	s, err := Start(cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return s.Close()
}
