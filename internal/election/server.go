package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/httpjson"
	"github.com/kvcache-go/mooncake/internal/httpserve"
	"github.com/kvcache-go/mooncake/internal/leader"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrNotLeader is what a follower answers to the master's admin API.
var ErrNotLeader = errors.New("not leader")

// Config configures one HA master candidate.
type Config struct {
	Endpoints []string                  // etcd endpoints host:port (required)
	Cluster   string                    // cluster id (leader.DefaultCluster)
	LeaseTTL  time.Duration             // election lease; a dead leader is replaced after it (5s; whole seconds, >= 1s)
	Master    masterserver.ServerConfig // the master run while leader; its HTTPAddr is served here (see Server)
	Advertise string                    // host clients dial; "" = the gRPC listen host, 127.0.0.1 if unspecified
	Logger    *slog.Logger
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case len(c.Endpoints) == 0:
		return fmt.Errorf("election: no etcd endpoint")
	case c.LeaseTTL < 0 || (c.LeaseTTL > 0 && c.LeaseTTL < time.Second):
		return fmt.Errorf("election: lease TTL %v below 1s", c.LeaseTTL)
	case strings.ContainsAny(c.Cluster, "/ \t\n"):
		return fmt.Errorf("election: bad cluster id %q", c.Cluster)
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
//
// New builds one without any I/O; Run connects to etcd and campaigns until
// its context ends. Start and Close (or Kill) wrap both for callers that
// want a candidate running in the background.
type Server struct {
	cfg Config
	log *slog.Logger
	key string

	mu     sync.Mutex
	cli    *clientv3.Client // set by connect
	hl     net.Listener     // the admin listener Run serves (nil = none)
	role   Role
	view   leader.View
	srv    *masterserver.Server
	admin  http.Handler
	killed bool
	change chan struct{} // closed and replaced on every role change

	// Set by Start.
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New validates cfg and fills its defaults. It connects to nothing, binds
// no port and starts no goroutine.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Cluster == "" {
		cfg.Cluster = leader.DefaultCluster
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, log: cfg.Logger, key: leader.Key(cfg.Cluster), role: RoleFollower, change: make(chan struct{})}, nil
}

// Run connects to etcd, serves the admin API on httpLn (nil = none) and
// campaigns, leads and campaigns again until ctx ends. It then steps down
// (unless killed), closes httpLn and the etcd client and returns once every
// goroutine it started has stopped. A Server is run at most once.
func (s *Server) Run(ctx context.Context, httpLn net.Listener) error {
	if err := s.connect(); err != nil {
		if httpLn != nil {
			httpLn.Close()
		}
		return err
	}
	return s.serve(ctx, httpLn)
}

func (s *Server) connect() error {
	cli, err := leader.NewEtcdClient(s.cfg.Endpoints)
	if err != nil {
		return fmt.Errorf("election: %w", err)
	}
	s.mu.Lock()
	s.cli = cli
	s.mu.Unlock()
	return nil
}

// serve runs the admin listener and the election loop on a connected
// candidate until ctx ends.
func (s *Server) serve(ctx context.Context, httpLn net.Listener) error {
	s.mu.Lock()
	s.hl = httpLn
	s.mu.Unlock()
	var wg sync.WaitGroup
	if httpLn != nil {
		wg.Go(func() {
			if err := httpserve.Serve(ctx, httpLn, s.handler(), time.Second); err != nil {
				s.log.Error("election: admin serve", "err", err)
			}
		})
	}
	wg.Go(func() { s.loop(ctx) })
	<-ctx.Done()
	wg.Wait()
	_ = s.cli.Close()
	s.setRole(RoleStopped, leader.View{}, nil)
	return nil
}

// Start connects to etcd, listens on cfg.Master.HTTPAddr ("" = no admin
// listener) and campaigns in the background until Close or Kill. It
// returns at once; Role, View and WaitRole report progress.
func Start(cfg Config) (*Server, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.connect(); err != nil {
		return nil, err
	}
	var hl net.Listener
	if addr := s.cfg.Master.HTTPAddr; addr != "" {
		hl, err = net.Listen("tcp", addr)
		if err != nil {
			s.cli.Close()
			return nil, fmt.Errorf("election: listen %s: %w", addr, err)
		}
	}
	s.hl = hl
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		_ = s.serve(ctx, hl)
	}()
	return s, nil
}

// HTTPAddr is the admin listen address ("" when disabled).
func (s *Server) HTTPAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return httpserve.Addr(s.hl)
}

// Role is the candidate's current role.
func (s *Server) Role() Role {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.role
}

// View is the view this candidate published while leader (zero otherwise).
func (s *Server) View() leader.View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view
}

// Master is the running master while leader (nil otherwise).
func (s *Server) Master() *masterserver.Server {
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
			return fmt.Errorf("election: waiting for role %s (now %s): %w", r, cur, ctx.Err())
		case <-ch:
		}
	}
}

func (s *Server) setRole(r Role, v leader.View, srv *masterserver.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.role, s.view, s.srv = r, v, srv
	s.admin = nil
	if srv != nil {
		s.admin = srv.AdminHTTP()
	}
	close(s.change)
	s.change = make(chan struct{})
}

// Close stops a candidate started with Start: it steps down (deleting its
// election key, so a standby takes over at once), stops the master and the
// admin listener and closes the etcd client.
func (s *Server) Close() error { return s.stop(false) }

// Kill stops a candidate started with Start as a crash would: the master
// stops serving and the lease is no longer refreshed but neither revoked
// nor resigned, so a standby takes over only when the lease expires
// (tests).
func (s *Server) Kill() error { return s.stop(true) }

func (s *Server) stop(kill bool) error {
	s.once.Do(func() {
		s.mu.Lock()
		s.killed = kill
		s.mu.Unlock()
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
	})
	return nil
}

func (s *Server) isKilled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killed
}

// loop campaigns, leads until the session ends, and campaigns again.
func (s *Server) loop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if err := s.term(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("election: term", "err", err)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
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
func (s *Server) term(ctx context.Context) error {
	ttl := int((s.cfg.LeaseTTL + time.Second - 1) / time.Second)
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	defer s.endSession(sess)
	// The campaign and the term end with the session (lease lost) or Close.
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		select {
		case <-sess.Done():
			tcancel()
		case <-done:
		}
	})
	defer func() { close(done); wg.Wait() }()

	el := concurrency.NewElection(sess, s.key)
	s.log.Info("election: campaigning", "key", s.key, "lease", fmt.Sprintf("%x", sess.Lease()))
	if err := el.Campaign(tctx, ""); err != nil {
		if tctx.Err() != nil {
			return nil // closing, or the session ended: campaign again
		}
		return fmt.Errorf("campaign: %w", err)
	}
	return s.lead(ctx, tctx, el)
}

// endSession lets the session go; its lease is revoked unless the
// candidate was killed (a crash leaves the lease to expire).
func (s *Server) endSession(sess *concurrency.Session) {
	sess.Orphan()
	if s.isKilled() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, _ = s.cli.Revoke(ctx, sess.Lease())
	cancel()
}

// lead runs a fresh master, proclaims its view and serves until the term
// (tctx) ends, then steps down.
func (s *Server) lead(ctx, tctx context.Context, el *concurrency.Election) error {
	resign := func() {
		if s.isKilled() {
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = el.Resign(rctx)
		cancel()
	}
	mcfg := s.cfg.Master
	mcfg.HTTPAddr = ""
	mcfg.Logger = s.log
	srv, err := masterserver.Start(mcfg)
	if err != nil {
		resign()
		return fmt.Errorf("start master: %w", err)
	}
	v := leader.View{Addr: advertise(s.cfg.Advertise, srv.Addr()), Version: el.Rev()}
	if err := el.Proclaim(tctx, v.String()); err != nil {
		srv.Close()
		resign()
		if tctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("proclaim: %w", err)
	}
	s.setRole(RoleLeader, v, srv)
	s.log.Info("election: leading", "addr", v.Addr, "view", v.Version)
	<-tctx.Done()
	s.setRole(RoleFollower, leader.View{}, nil)
	srv.Close()
	if ctx.Err() == nil {
		s.log.Warn("election: lost leadership (lease ended)", "view", v.Version)
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

// handler is the candidate's admin API: /health, /role and /leader always,
// the master's admin API while leading.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "OK") })
	mux.HandleFunc("GET /role", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		r, v := s.role, s.view
		s.mu.Unlock()
		httpjson.Write(w, http.StatusOK, map[string]any{"role": r, "cluster": s.cfg.Cluster, "addr": v.Addr, "view": v.Version})
	})
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, r *http.Request) {
		v, _, err := leader.ReadLeader(r.Context(), s.cli, s.key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]any{"cluster": s.cfg.Cluster, "addr": v.Addr, "view": v.Version})
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
