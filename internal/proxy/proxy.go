package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvcache-go/mooncake/internal/httpserve"
	"github.com/kvcache-go/mooncake/internal/kvevents"
)

// Role names used in metrics and errors.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// ErrNoInstance is returned (as HTTP 503) when no healthy instance of a role
// is available; ErrOverloaded (as HTTP 429) when every healthy one is at
// Config.MaxInFlight.
var (
	ErrNoInstance = errors.New("proxy: no healthy instance")
	ErrOverloaded = errors.New("proxy: overloaded")
	// ErrTTFTSLO (as HTTP 429) when the conductor predicts a time to first
	// token above Config.TTFTSLO on every prefill instance.
	ErrTTFTSLO = errors.New("proxy: predicted TTFT over the SLO")
)

// errPrefillRejected cancels the decode half when prefill refused the request
// as malformed (4xx): the client gets prefill's answer.
var errPrefillRejected = errors.New("proxy: prefill rejected the request")

// indexerID is the instance's instance_id at a remote indexer.
func (in *instance) indexerID() string {
	if in.indexID != "" {
		return in.indexID
	}
	return in.url
}

type instance struct {
	role      string
	url       string
	bootstrap string // prefill only
	events    string // prefill only: KV event endpoints ("" none)
	replay    string
	indexID   string // prefill only: its instance_id at a remote indexer ("" the URL)

	inflight atomic.Int64

	mu       sync.Mutex
	healthy  bool
	fails    int
	engineID string
	lastErr  string
}

func (in *instance) snapshot() (healthy bool, engineID, lastErr string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.healthy, in.engineID, in.lastErr
}

// Proxy is the OpenAI-compatible front door of a P/D cluster. Build it with
// New and Run it; or, serving Handler some other way (tests with httptest),
// call CheckNow for the health checks and Close it at the end.
type Proxy struct {
	cfg       Config
	log       *slog.Logger
	prefill   []*instance
	decode    []*instance
	pPol      Policy
	dPol      Policy
	conductor *Conductor      // pPol when it is the conductor (its queue gauges), else nil
	events    *kvevents.Index // fed by the prefill instances' KV events (nil: none)
	indexer   *indexer        // a remote indexer (nil: none)
	tok       *promptTokenizer
	subsMu    sync.Mutex
	subs      map[string]*kvevents.Subscriber

	reg         *prometheus.Registry
	mRequests   *prometheus.CounterVec
	mUpErrors   *prometheus.CounterVec
	mNoInst     *prometheus.CounterVec
	mRejected   *prometheus.CounterVec
	mSLO        prometheus.Counter
	mDisconnect prometheus.Counter
	mTTFB       prometheus.Histogram
	mIndexer    *prometheus.CounterVec
	mTokenize   prometheus.Counter
	pairs       pairTable // exchanges per (prefill, decode) pair, for the summary

	// life cancels the background upstream requests (prefill halves that
	// outlive their client, releases) when the proxy stops.
	life lifetime
	wg   sync.WaitGroup
}

// New validates cfg and returns a Proxy. It binds nothing and starts no
// goroutine: Run does. Instances are out of rotation until their first
// successful health check (CheckNow or Run).
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Proxy{cfg: cfg, log: cfg.Logger}
	for _, s := range cfg.Prefill {
		sp, err := ParsePrefillSpec(s)
		if err != nil {
			return nil, err
		}
		p.prefill = append(p.prefill, &instance{role: RolePrefill, url: sp.URL, bootstrap: sp.Bootstrap, events: sp.Events, replay: sp.Replay, indexID: sp.ID})
		if sp.Events != "" && p.events == nil {
			p.events = kvevents.NewIndex()
		}
	}
	for _, s := range cfg.Decode {
		u, err := parseBaseURL(s)
		if err != nil {
			return nil, err
		}
		p.decode = append(p.decode, &instance{role: RoleDecode, url: u})
	}
	if cfg.Indexer.URL != "" {
		p.indexer = &indexer{cfg: cfg.Indexer, client: cfg.Client}
	}
	tok, err := newPromptTokenizer(cfg.Tokenizer, cfg.Client)
	if err != nil {
		return nil, err
	}
	p.tok = tok
	if p.pPol, p.conductor, err = prefillPolicy(cfg, p.events); err != nil {
		return nil, err
	}
	if p.dPol, err = NewPolicy(cfg.DecodePolicy); err != nil {
		return nil, err
	}
	p.initMetrics()
	return p, nil
}

// prefillPolicy is cfg.PrefillPolicy, fed by the instances' KV events when
// events is not nil, and the conductor when it is one (for its metrics).
func prefillPolicy(cfg Config, events *kvevents.Index) (Policy, *Conductor, error) {
	switch {
	case cfg.PrefillPolicy == PolicyConductor:
		cc := ConductorConfig{Cost: cfg.Cost, BlockBytes: cfg.BlockBytes}
		if events != nil {
			cc.BlockBytes, cc.Matched = cfg.EventBlockSize, events.Matched
		}
		if cfg.Indexer.URL != "" {
			cc.BlockBytes = cfg.Indexer.BlockSize
		}
		c := NewConductor(cc)
		return c, c, nil
	case cfg.PrefillPolicy == PolicyKVAware && events != nil:
		return picked{NewKVAware(KVAwareConfig{Matched: events.Matched, Tiers: cfg.Tiers})}, nil, nil
	case cfg.PrefillPolicy == PolicyKVAware:
		return picked{NewKVAware(KVAwareConfig{Tiers: cfg.Tiers})}, nil, nil
	}
	pol, err := NewPolicy(cfg.PrefillPolicy)
	return pol, nil, err
}

// Run checks the instances' health every HealthInterval and serves Handler
// on ln until ctx ends; then it shuts the server down (bounded), cancels the
// background upstream requests and returns once every goroutine the proxy
// started has exited. It returns the listener's error if serving failed.
func (p *Proxy) Run(ctx context.Context, ln net.Listener) error {
	defer p.Close()
	hctx, stopHealth := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		p.healthLoop(hctx)
	}()
	p.runSubscribers(hctx, &bg)
	err := httpserve.Serve(ctx, ln, p.Handler(), 5*time.Second)
	stopHealth()
	bg.Wait()
	return err
}

// Close cancels the background upstream requests and waits for every
// goroutine the proxy started. Run does it on return; call it only when
// serving Handler some other way (tests with httptest).
func (p *Proxy) Close() error {
	p.life.end()
	p.wg.Wait()
	return nil
}

// needsEngineID: the protocol names prefill's engine id in decode's half.
func (p *Proxy) needsEngineID() bool {
	return p.cfg.Protocol == ProtocolMooncake || p.cfg.Protocol == ProtocolVLLMTransferID
}
