package masterha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Config configures one HA master candidate.
type Config struct {
	Endpoints []string            // etcd endpoints host:port (required)
	Cluster   string              // cluster id (DefaultCluster)
	LeaseTTL  time.Duration       // election lease; a dead leader is replaced after it (5s; whole seconds, >= 1s)
	Master    master.ServerConfig // the master run while leader; its HTTPAddr is served here (see Server)
	Advertise string              // host clients dial; "" = the gRPC listen host, 127.0.0.1 if unspecified
	Logger    *slog.Logger
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case len(c.Endpoints) == 0:
		return fmt.Errorf("masterha: no etcd endpoint")
	case c.LeaseTTL < 0 || (c.LeaseTTL > 0 && c.LeaseTTL < time.Second):
		return fmt.Errorf("masterha: lease TTL %v below 1s", c.LeaseTTL)
	case strings.ContainsAny(c.Cluster, "/ \t\n"):
		return fmt.Errorf("masterha: bad cluster id %q", c.Cluster)
	}
	mc := c.Master
	mc.HTTPAddr = ""
	return mc.Validate()
}

// Role of a candidate.
type Role string

// Roles.
const (
	RoleFollower Role = "follower" // campaigning; no master RPC listener
	RoleLeader   Role = "leader"   // serving the master RPC
	RoleStopped  Role = "stopped"
)

// Server is an HA master candidate: it campaigns for leadership of its
// cluster in etcd and runs a master (an empty one, every time it wins)
// only while it leads. Its admin HTTP listener serves /role and /leader
// always, and the master's admin API (/metrics, /query_key, ...) while it
// leads (503 "not leader" otherwise).
type Server struct {
	cfg    Config
	log    *slog.Logger
	cli    *clientv3.Client
	key    string
	http   *http.Server
	hl     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu     sync.Mutex
	role   Role
	view   View
	srv    *master.Server
	admin  http.Handler
	killed bool
	change chan struct{} // closed and replaced on every role change
}

// Start connects to etcd, starts the admin listener and begins campaigning.
// It returns at once; Role, View and WaitLeader report progress.
func Start(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Cluster == "" {
		cfg.Cluster = DefaultCluster
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cli, err := newEtcdClient(cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, cli: cli, key: Key(cfg.Cluster), role: RoleFollower, change: make(chan struct{})}
	if cfg.Master.HTTPAddr != "" {
		s.hl, err = net.Listen("tcp", cfg.Master.HTTPAddr)
		if err != nil {
			cli.Close()
			return nil, fmt.Errorf("masterha: listen %s: %w", cfg.Master.HTTPAddr, err)
		}
		s.http = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.http.Serve(s.hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("masterha admin serve", "err", err)
			}
		}()
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.loop()
	return s, nil
}

// HTTPAddr is the admin listen address ("" when disabled).
func (s *Server) HTTPAddr() string {
	if s.hl == nil {
		return ""
	}
	return s.hl.Addr().String()
}

// Role is the candidate's current role.
func (s *Server) Role() Role {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.role
}

// View is the view this candidate published while leader (zero otherwise).
func (s *Server) View() View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view
}

// Master is the running master while leader (nil otherwise).
func (s *Server) Master() *master.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// WaitRole waits until the candidate has role r or ctx ends.
func (s *Server) WaitRole(ctx context.Context, r Role) error {
	for {
		s.mu.Lock()
		cur, ch := s.role, s.change
		s.mu.Unlock()
		if cur == r {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("masterha: waiting for role %s (now %s): %w", r, cur, ctx.Err())
		case <-ch:
		}
	}
}

func (s *Server) setRole(r Role, v View, srv *master.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.role, s.view, s.srv = r, v, srv
	s.admin = nil
	if srv != nil {
		s.admin = master.AdminHandler(srv.Core())
	}
	close(s.change)
	s.change = make(chan struct{})
}

// Close steps down (deleting its election key, so a standby takes over at
// once), stops the master and the admin listener and closes the etcd client.
func (s *Server) Close() error { return s.stop(false) }

// Kill stops as a crash would: the master stops serving and the lease is
// no longer refreshed but neither revoked nor resigned, so a standby takes
// over only when the lease expires (tests).
func (s *Server) Kill() error { return s.stop(true) }

func (s *Server) stop(kill bool) error {
	s.once.Do(func() {
		s.mu.Lock()
		s.killed = kill
		s.mu.Unlock()
		s.cancel()
		if s.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.http.Shutdown(ctx)
			cancel()
		}
		s.wg.Wait()
		_ = s.cli.Close()
		s.setRole(RoleStopped, View{}, nil)
	})
	return nil
}

func (s *Server) isKilled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killed
}

// loop campaigns, leads until the session ends, and campaigns again.
func (s *Server) loop() {
	defer s.wg.Done()
	backoff := 100 * time.Millisecond
	for s.ctx.Err() == nil {
		if err := s.term(); err != nil && s.ctx.Err() == nil {
			s.log.Warn("masterha: election", "err", err)
			t := time.NewTimer(backoff)
			select {
			case <-s.ctx.Done():
			case <-t.C:
			}
			t.Stop()
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

// term is one session: campaign, lead, step down.
func (s *Server) term() error {
	ttl := int((s.cfg.LeaseTTL + time.Second - 1) / time.Second)
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(ttl), concurrency.WithContext(s.ctx))
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	defer func() {
		sess.Orphan()
		if !s.isKilled() { // a crash leaves the lease to expire
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = s.cli.Revoke(ctx, sess.Lease())
			cancel()
		}
	}()
	// The campaign and the term end with the session (lease lost) or Close.
	tctx, tcancel := context.WithCancel(s.ctx)
	defer tcancel()
	stopWatch := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-sess.Done():
			tcancel()
		case <-stopWatch:
		}
	}()
	defer func() { close(stopWatch); wg.Wait() }()

	el := concurrency.NewElection(sess, s.key)
	s.log.Info("masterha: campaigning", "key", s.key, "lease", fmt.Sprintf("%x", sess.Lease()))
	if err := el.Campaign(tctx, ""); err != nil {
		if tctx.Err() != nil {
			return nil // closing, or the session ended: campaign again
		}
		return fmt.Errorf("campaign: %w", err)
	}
	resign := func() {
		if s.isKilled() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = el.Resign(ctx)
		cancel()
	}
	mcfg := s.cfg.Master
	mcfg.HTTPAddr = ""
	mcfg.Logger = s.log
	srv, err := master.Start(mcfg)
	if err != nil {
		resign()
		return fmt.Errorf("start master: %w", err)
	}
	v := View{Addr: advertise(s.cfg.Advertise, srv.Addr()), Version: el.Rev()}
	if err := el.Proclaim(tctx, v.String()); err != nil {
		srv.Close()
		resign()
		if tctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("proclaim: %w", err)
	}
	s.setRole(RoleLeader, v, srv)
	s.log.Info("masterha: leading", "addr", v.Addr, "view", v.Version)
	<-tctx.Done()
	s.setRole(RoleFollower, View{}, nil)
	srv.Close()
	if s.ctx.Err() == nil {
		s.log.Warn("masterha: lost leadership (lease ended)", "view", v.Version)
	}
	resign()
	return nil
}

// advertise is the address published for a listener at addr.
func advertise(host, addr string) string {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" {
		host = h
		if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
			host = "127.0.0.1"
		}
	}
	return net.JoinHostPort(host, port)
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "OK") })
	mux.HandleFunc("GET /role", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		r, v := s.role, s.view
		s.mu.Unlock()
		writeJSON(w, map[string]any{"role": r, "cluster": s.cfg.Cluster, "addr": v.Addr, "view": v.Version})
	})
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, r *http.Request) {
		v, _, err := ReadLeader(r.Context(), s.cli, s.key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, map[string]any{"cluster": s.cfg.Cluster, "addr": v.Addr, "view": v.Version})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		h := s.admin
		s.mu.Unlock()
		if h == nil {
			http.Error(w, ErrNotLeader.Error()+" (see /leader)", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
