// Package service is `mooncake conductor`: the conductor index
// (internal/conductor) behind Mooncake's Indexer API over HTTP, fed by the
// KV events of the publishers registered with it over ZMQ.
//
// # Endpoints
//
// POST /register, /unregister, /query, /query_by_hash; GET /global_view,
// /registrations, /metrics, /health. Bodies are JSON in the shapes of
// Mooncake's Indexer API (docs/conductor.md has them with examples).
// Errors are {"error": message, "reason": code, "field": name}: 400 for a
// body that is not JSON, a missing field (reason "missing"), a field of
// the wrong type ("invalid_type") or value ("invalid_value"), a
// registration the index refuses ("invalid_registration") or a block_size
// that is not the one the model's instances registered
// ("block_size_mismatch"); 404 for an instance a query names that is not
// registered ("unknown_instance") and for unregistering what is not
// registered ("not_found"); 405 for a wrong method. The service keeps
// serving whatever it is sent.
//
// # Events
//
// Each registration starts a kvevents.Subscriber on its endpoint (ZMQ SUB,
// batches in sequence order; a gap is replayed from replay_endpoint, or
// else the publisher's blocks are forgotten, as after a publisher restart)
// that applies the batches to the index under the registration's key.
// Registering the same key again with another endpoint restarts its
// subscriber; unregistering stops it and forgets its blocks. vLLM, SGLang
// and Mooncake (store master) publishers all send the same three-frame
// messages; the decoder reads every event shape (kvevents.Decode).
//
// # Lifecycle
//
// New makes the service and binds nothing. Run(ctx, ln) serves on ln and
// runs the subscribers until ctx ends, then stops them all and returns
// once every goroutine it started has exited.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvcache-go/mooncake/internal/conductor"
	"github.com/kvcache-go/mooncake/internal/httpserve"
	"github.com/kvcache-go/mooncake/internal/kvevents"
)

// Config configures the service.
type Config struct {
	// Index configures the index (seed, capacity).
	Index conductor.Config
	// ReplayTimeout bounds one replay request (kvevents default).
	ReplayTimeout time.Duration
	// MaxBodyBytes bounds a request body (64 MiB: a 128k-token query in
	// JSON is under 1 MiB).
	MaxBodyBytes int64
	Logger       *slog.Logger
}

// Service is the conductor service.
type Service struct {
	cfg Config
	idx *conductor.Index
	log *slog.Logger
	reg *prometheus.Registry
	m   metrics

	regMu  sync.Mutex // serializes Register and Unregister
	mu     sync.Mutex
	runCtx context.Context // set by Run; nil before
	subs   map[conductor.StreamKey]*sub
	wg     sync.WaitGroup
}

type sub struct {
	reg    conductor.Registration
	s      *kvevents.Subscriber
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a service; it starts nothing.
func New(cfg Config) *Service {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, idx: conductor.New(cfg.Index), log: cfg.Logger, subs: map[conductor.StreamKey]*sub{}}
	s.initMetrics()
	return s
}

// Index is the service's index.
func (s *Service) Index() *conductor.Index { return s.idx }

// Run serves on ln and follows the registered publishers until ctx ends.
func (s *Service) Run(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.runCtx = ctx
	pending := make([]*sub, 0, len(s.subs))
	for _, sb := range s.subs {
		pending = append(pending, sb)
	}
	s.mu.Unlock()
	for _, sb := range pending {
		s.start(ctx, sb)
	}
	err := httpserve.Serve(ctx, ln, s.Handler(), 5*time.Second)
	cancel()
	s.stopAll()
	return err
}

// Register adds (or replaces) a publisher and follows its events; the
// /register handler calls it, and callers may too (a static config).
func (s *Service) Register(r conductor.Registration) (created bool, err error) {
	if !strings.HasPrefix(r.Endpoint, "tcp://") && !strings.HasPrefix(r.Endpoint, "ipc://") {
		return false, fmt.Errorf("%w: endpoint %q (want tcp://HOST:PORT or ipc://PATH)", conductor.ErrInvalid, r.Endpoint)
	}
	if r.ReplayEndpoint != "" && !strings.HasPrefix(r.ReplayEndpoint, "tcp://") && !strings.HasPrefix(r.ReplayEndpoint, "ipc://") {
		return false, fmt.Errorf("%w: replay_endpoint %q (want tcp://HOST:PORT or ipc://PATH)", conductor.ErrInvalid, r.ReplayEndpoint)
	}
	if err := r.Validate(); err != nil {
		return false, err
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	k := r.Key()
	s.mu.Lock()
	old := s.subs[k]
	s.mu.Unlock()
	same := old != nil && old.reg.Endpoint == r.Endpoint && old.reg.ReplayEndpoint == r.ReplayEndpoint
	if old != nil && !same {
		// Another publisher under this key: its subscriber stops before
		// the new registration exists, so none of its batches lands there.
		s.stop(old)
		s.mu.Lock()
		delete(s.subs, k)
		s.mu.Unlock()
	}
	if created, err = s.idx.Register(r); err != nil {
		return false, err
	}
	nr, _ := findReg(s.idx, k)
	if same {
		old.reg = nr // the same stream keeps its subscriber
		return created, nil
	}
	sb := &sub{reg: nr, done: make(chan struct{})}
	sb.s, err = kvevents.NewSubscriber(kvevents.SubscriberConfig{Instance: k.String(), Endpoint: r.Endpoint,
		ReplayEndpoint: r.ReplayEndpoint, ReplayTimeout: s.cfg.ReplayTimeout, Sink: sink{s.idx, k}, Logger: s.log.With("publisher", k.String())})
	if err != nil {
		s.idx.Unregister(k)
		return false, err
	}
	s.mu.Lock()
	s.subs[k] = sb
	ctx := s.runCtx
	s.mu.Unlock()
	if ctx != nil {
		s.start(ctx, sb)
	}
	return true, nil
}

func findReg(idx *conductor.Index, k conductor.StreamKey) (conductor.Registration, bool) {
	for _, r := range idx.Registrations() {
		if r.Key() == k {
			return r, true
		}
	}
	return conductor.Registration{}, false
}

// Unregister stops following a publisher and forgets its blocks.
func (s *Service) Unregister(k conductor.StreamKey) error {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if k.Tenant == "" {
		k.Tenant = conductor.DefaultTenant
	}
	if _, err := s.idx.Unregister(k); err != nil {
		return err
	}
	s.mu.Lock()
	sb := s.subs[k]
	delete(s.subs, k)
	s.mu.Unlock()
	if sb != nil {
		s.stop(sb)
	}
	return nil
}

func (s *Service) start(ctx context.Context, sb *sub) {
	sctx, cancel := context.WithCancel(ctx)
	sb.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(sb.done)
		for sctx.Err() == nil {
			if err := sb.s.Run(sctx); err != nil {
				s.log.Warn("kv events", "publisher", sb.reg.Key().String(), "err", err)
				select {
				case <-sctx.Done():
				case <-time.After(200 * time.Millisecond): // the socket failed: dial again
				}
			}
		}
	}()
}

// stop ends a subscriber started by start (a no-op for one never started).
func (s *Service) stop(sb *sub) {
	if sb.cancel == nil {
		return
	}
	sb.cancel()
	<-sb.done
}

func (s *Service) stopAll() {
	s.mu.Lock()
	all := make([]*sub, 0, len(s.subs))
	for _, sb := range s.subs {
		all = append(all, sb)
	}
	s.mu.Unlock()
	for _, sb := range all {
		if sb.cancel != nil {
			sb.cancel()
		}
	}
	s.wg.Wait()
}

// SubStats reports each followed publisher's stream (applied, gaps,
// replayed, dropped, bad, restarts).
func (s *Service) SubStats() map[conductor.StreamKey]kvevents.SubStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[conductor.StreamKey]kvevents.SubStats, len(s.subs))
	for k, sb := range s.subs {
		out[k] = sb.s.Stats()
	}
	return out
}

// sink applies a subscriber's batches under its key.
type sink struct {
	idx *conductor.Index
	k   conductor.StreamKey
}

func (k sink) Apply(_ string, b kvevents.Batch) {
	// The only error is an unknown stream: it was unregistered while a
	// batch was in flight, and there is nothing to do.
	_ = k.idx.Apply(k.k, b)
}

func (k sink) Clear(string) { k.idx.Clear(k.k) }
