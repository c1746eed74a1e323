package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvcache-go/mooncake/internal/dashboard"
	"github.com/kvcache-go/mooncake/internal/httpjson"
	"github.com/kvcache-go/mooncake/internal/httpserve"
	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
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

type instance struct {
	role      string
	url       string
	bootstrap string // prefill only
	events    string // prefill only: KV event endpoints ("" none)
	replay    string

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
// New, call Start to begin health checks, serve Handler, and Close it.
type Proxy struct {
	cfg     Config
	log     *slog.Logger
	prefill []*instance
	decode  []*instance
	pPol    Policy
	dPol    Policy
	events  *kvevents.Index // fed by the prefill instances' KV events (nil: none)
	subsMu  sync.Mutex
	subs    map[string]*kvevents.Subscriber

	reg         *prometheus.Registry
	mRequests   *prometheus.CounterVec
	mUpErrors   *prometheus.CounterVec
	mNoInst     *prometheus.CounterVec
	mRejected   *prometheus.CounterVec
	mSLO        prometheus.Counter
	mDisconnect prometheus.Counter
	mTTFB       prometheus.Histogram
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
		sp, _ := ParsePrefillSpec(s)
		p.prefill = append(p.prefill, &instance{role: RolePrefill, url: sp.URL, bootstrap: sp.Bootstrap, events: sp.Events, replay: sp.Replay})
	}
	for _, s := range cfg.Decode {
		u, _ := parseBaseURL(s)
		p.decode = append(p.decode, &instance{role: RoleDecode, url: u})
	}
	for _, s := range cfg.Prefill {
		if sp, _ := ParsePrefillSpec(s); sp.Events != "" {
			p.events = kvevents.NewIndex()
			break
		}
	}
	p.pPol, _ = NewPolicy(cfg.PrefillPolicy)
	switch {
	case cfg.PrefillPolicy == PolicyConductor && p.events != nil:
		p.pPol = NewConductor(ConductorConfig{Cost: cfg.Cost, BlockBytes: cfg.EventBlockSize, Matched: p.events.Matched})
	case cfg.PrefillPolicy == PolicyConductor:
		p.pPol = NewConductor(ConductorConfig{Cost: cfg.Cost, BlockBytes: cfg.BlockBytes})
	case cfg.PrefillPolicy == PolicyKVAware && p.events != nil:
		p.pPol = NewKVAware(KVAwareConfig{Matched: p.events.Matched})
	}
	p.dPol, _ = NewPolicy(cfg.DecodePolicy)
	p.initMetrics()
	return p, nil
}

func (p *Proxy) initMetrics() {
	p.reg = prometheus.NewRegistry()
	p.mRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mooncake_proxy_requests_total", Help: "Client requests by endpoint and HTTP status code.",
	}, []string{"endpoint", "code"})
	p.mUpErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mooncake_proxy_upstream_errors_total", Help: "Failed upstream requests (network error or 5xx) by role and instance.",
	}, []string{"role", "instance"})
	p.mNoInst = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mooncake_proxy_no_instance_total", Help: "Requests refused with 503 because no instance of a role was healthy.",
	}, []string{"role"})
	p.mRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mooncake_proxy_rejected_total", Help: "Requests rejected early with 429 because every instance of a role was at its in-flight limit.",
	}, []string{"role"})
	p.mSLO = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mooncake_proxy_ttft_slo_rejected_total", Help: "Requests rejected early with 429 because the conductor's predicted time to first token exceeded the TTFT SLO on every prefill instance.",
	})
	p.mDisconnect = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mooncake_proxy_client_disconnects_total", Help: "Requests whose client went away before the answer ended; both upstream halves were cancelled.",
	})
	p.mTTFB = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "mooncake_proxy_decode_first_byte_seconds", Help: "Time from request arrival to decode's response headers.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	gauge := func(name, help string, f func(*instance) float64) {
		for _, in := range append(append([]*instance{}, p.prefill...), p.decode...) {
			in := in
			p.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: name, Help: help, ConstLabels: prometheus.Labels{"role": in.role, "instance": in.url},
			}, func() float64 { return f(in) }))
		}
	}
	gauge("mooncake_proxy_instance_healthy", "1 if the instance is in rotation.", func(in *instance) float64 {
		if h, _, _ := in.snapshot(); h {
			return 1
		}
		return 0
	})
	gauge("mooncake_proxy_instance_inflight", "Requests in flight on the instance.", func(in *instance) float64 {
		return float64(in.inflight.Load())
	})
	if c, ok := p.pPol.(*Conductor); ok {
		for _, in := range p.prefill {
			in := in
			p.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "mooncake_proxy_instance_queued_prefill_seconds", Help: "Conductor: predicted prefill seconds of the requests dispatched to the instance and not yet answered.",
				ConstLabels: prometheus.Labels{"role": in.role, "instance": in.url},
			}, func() float64 { s, _ := c.Queue(in.url); return s }))
		}
	}
	for _, in := range p.prefill {
		if in.events == "" {
			continue
		}
		in := in
		stat := func(f func(kvevents.SubStats) uint64) func() float64 {
			return func() float64 { return float64(f(p.EventStats()[in.url])) }
		}
		for result, f := range map[string]func(kvevents.SubStats) uint64{
			"applied": func(s kvevents.SubStats) uint64 { return s.Applied }, "gap": func(s kvevents.SubStats) uint64 { return s.Gaps },
			"replayed": func(s kvevents.SubStats) uint64 { return s.Replayed }, "dropped": func(s kvevents.SubStats) uint64 { return s.Dropped },
			"bad": func(s kvevents.SubStats) uint64 { return s.Bad },
		} {
			p.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mooncake_proxy_kv_event_batches_total",
				Help:        "KV event batches from a prefill instance: applied, gaps detected, replayed, dropped (duplicate or late), bad (undecodable).",
				ConstLabels: prometheus.Labels{"instance": in.url, "result": result}}, stat(f)))
		}
		p.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mooncake_proxy_kv_event_blocks",
			Help: "Blocks a prefill instance holds, as its KV events say.", ConstLabels: prometheus.Labels{"instance": in.url}},
			func() float64 { return float64(p.events.Blocks(in.url)) }))
	}
	p.reg.MustRegister(p.mRequests, p.mUpErrors, p.mNoInst, p.mRejected, p.mSLO, p.mDisconnect, p.mTTFB)
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

// runSubscribers follows the KV events of every prefill instance that
// publishes them, feeding the prefix index, until ctx ends.
func (p *Proxy) runSubscribers(ctx context.Context, wg *sync.WaitGroup) {
	for _, in := range p.prefill {
		if in.events == "" {
			continue
		}
		sub, err := kvevents.NewSubscriber(kvevents.SubscriberConfig{Instance: in.url, Endpoint: in.events,
			ReplayEndpoint: in.replay, Sink: p.events, Logger: p.log.With("instance", in.url)})
		if err != nil {
			p.log.Warn("kv events not followed", "instance", in.url, "err", err)
			continue
		}
		p.subsMu.Lock()
		if p.subs == nil {
			p.subs = map[string]*kvevents.Subscriber{}
		}
		p.subs[in.url] = sub
		p.subsMu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := sub.Run(ctx); err != nil {
					p.log.Warn("kv events", "instance", in.url, "err", err)
				}
			}
		}()
	}
}

// EventStats reports each followed prefill instance's KV event stream
// (applied, gaps, replayed, dropped, bad), by instance URL.
func (p *Proxy) EventStats() map[string]kvevents.SubStats {
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	out := map[string]kvevents.SubStats{}
	for u, s := range p.subs {
		out[u] = s.Stats()
	}
	return out
}

// EventIndex is the prefix index fed by the instances' KV events (nil when
// no prefill instance publishes them).
func (p *Proxy) EventIndex() *kvevents.Index { return p.events }

// healthLoop runs CheckNow every HealthInterval until ctx ends.
func (p *Proxy) healthLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.HealthInterval)
	defer t.Stop()
	for {
		p.CheckNow(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close cancels the background upstream requests and waits for every
// goroutine the proxy started. Run does it on return; call it only when
// serving Handler some other way (tests with httptest).
func (p *Proxy) Close() error {
	p.life.end()
	p.wg.Wait()
	return nil
}

// Ready reports whether every configured instance is healthy.
func (p *Proxy) Ready() bool {
	for _, in := range append(append([]*instance{}, p.prefill...), p.decode...) {
		if h, _, _ := in.snapshot(); !h {
			return false
		}
	}
	return true
}

// CheckNow runs one round of health checks on every instance concurrently
// and returns when all are done.
func (p *Proxy) CheckNow(ctx context.Context) {
	var wg sync.WaitGroup
	for _, in := range append(append([]*instance{}, p.prefill...), p.decode...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, p.cfg.HealthTimeout)
			defer cancel()
			engineID, err := p.check(cctx, in)
			p.record(in, engineID, err)
		}()
	}
	wg.Wait()
}

func (p *Proxy) check(ctx context.Context, in *instance) (string, error) {
	if err := p.getOK(ctx, in.url+"/health", nil); err != nil {
		return "", err
	}
	if in.role != RolePrefill {
		return "", nil
	}
	switch p.cfg.Protocol {
	case ProtocolVLLM, ProtocolVLLMSeed:
		return "", nil // vLLM's side channel is the engine's business
	case ProtocolSGLang:
		if err := p.getOK(ctx, "http://"+in.bootstrap+"/health", nil); err != nil {
			return "", fmt.Errorf("bootstrap: %w", err)
		}
		return "", nil
	}
	var q map[string]json.RawMessage
	if err := p.getOK(ctx, "http://"+in.bootstrap+"/query", &q); err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	id, err := QueryEngineID(q)
	if err != nil {
		return "", fmt.Errorf("bootstrap %s: %w", in.bootstrap, err)
	}
	return id, nil
}

// needsEngineID: the protocol names prefill's engine id in decode's half.
func (p *Proxy) needsEngineID() bool {
	return p.cfg.Protocol == ProtocolMooncake || p.cfg.Protocol == ProtocolVLLMTransferID
}

// QueryEngineID reads the engine id from a bootstrap registry's GET /query
// answer: ours ({engine_id, workers: [...]}) or vLLM's reworked connector's
// ({"<dp rank>": {engine_id, worker_addr}}, dp rank 0).
func QueryEngineID(q map[string]json.RawMessage) (string, error) {
	if raw, ok := q["engine_id"]; ok {
		var id string
		var workers []json.RawMessage
		json.Unmarshal(raw, &id)
		json.Unmarshal(q["workers"], &workers)
		if id == "" || len(workers) == 0 {
			return "", errors.New("no engine id or no registered worker yet")
		}
		return id, nil
	}
	var dp0 struct {
		EngineID   string          `json:"engine_id"`
		WorkerAddr json.RawMessage `json:"worker_addr"`
	}
	if raw, ok := q["0"]; ok && json.Unmarshal(raw, &dp0) == nil && dp0.EngineID != "" {
		return dp0.EngineID, nil
	}
	return "", errors.New("no engine id or no registered worker yet")
}

// get reads u's body (at most limit bytes); an answer other than 200 is an
// error.
func (p *Proxy) get(ctx context.Context, u string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	return b, nil
}

// getOK GETs u and decodes its JSON body into into (unless nil).
func (p *Proxy) getOK(ctx context.Context, u string, into any) error {
	b, err := p.get(ctx, u, 1<<20)
	if err != nil {
		return err
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			return fmt.Errorf("GET %s: %w", u, err)
		}
	}
	return nil
}

func (p *Proxy) record(in *instance, engineID string, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if err == nil {
		if !in.healthy {
			p.log.Info("instance in rotation", "role", in.role, "instance", in.url)
		}
		in.healthy, in.fails, in.lastErr = true, 0, ""
		if engineID != "" {
			in.engineID = engineID
		}
		return
	}
	in.fails++
	in.lastErr = err.Error()
	if in.healthy && in.fails >= p.cfg.FailAfter {
		in.healthy = false
		p.log.Warn("instance out of rotation", "role", in.role, "instance", in.url, "err", err)
	}
}

// markDown takes an instance out of rotation at once after a failed upstream
// connection; the next successful health check puts it back.
func (p *Proxy) markDown(in *instance, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.healthy {
		p.log.Warn("instance out of rotation", "role", in.role, "instance", in.url, "err", err)
	}
	in.healthy = false
	in.fails = p.cfg.FailAfter
	in.lastErr = err.Error()
}

// choose picks an instance of role for a prompt of promptTokens tokens with
// prefix hashes blocks. done must be called when the request to the chosen
// instance has ended, however it ended (it releases the conductor's queue
// estimate; a no-op for other policies).
func (p *Proxy) choose(pol Policy, role string, pool []*instance, blocks []uint64, promptTokens int) (_ *instance, done func(), _ error) {
	var cands []*instance
	var loads []Load
	for _, in := range pool {
		if h, eid, _ := in.snapshot(); h && (role != RolePrefill || eid != "" || !p.needsEngineID()) {
			cands = append(cands, in)
			loads = append(loads, Load{ID: in.url, InFlight: int(in.inflight.Load())})
		}
	}
	if len(cands) == 0 {
		p.mNoInst.WithLabelValues(role).Inc()
		return nil, nil, fmt.Errorf("%w: no healthy %s instance available (0 of %d healthy)", ErrNoInstance, role, len(pool))
	}
	if max := p.cfg.MaxInFlight; max > 0 {
		var c2 []*instance
		var l2 []Load
		for i, l := range loads {
			if l.InFlight < max {
				c2, l2 = append(c2, cands[i]), append(l2, l)
			}
		}
		if len(c2) == 0 {
			p.mRejected.WithLabelValues(role).Inc()
			return nil, nil, fmt.Errorf("%w: every healthy %s instance (%d) has %d requests in flight; retry later", ErrOverloaded, role, len(cands), max)
		}
		cands, loads = c2, l2
	}
	if c, ok := pol.(*Conductor); ok {
		plan := c.Plan(blocks, promptTokens, loads)
		in := cands[plan.Index]
		if slo := p.cfg.TTFTSLO; slo > 0 && plan.TTFT > slo.Seconds() {
			p.mSLO.Inc()
			return nil, nil, fmt.Errorf("%w: predicted time to first token %.3fs exceeds the TTFT SLO %v on every healthy %s instance (best %s: %.3fs queued + %.3fs prefill of %d tokens, %d cached); retry later",
				ErrTTFTSLO, plan.TTFT, slo, role, in.url, plan.Queue, plan.Prefill, promptTokens, plan.PrefixTokens)
		}
		c.Routed(in.url, blocks)
		return in, c.Enqueue(in.url, plan.Prefill), nil
	}
	in := cands[pol.Pick(blocks, loads)]
	pol.Routed(in.url, blocks)
	return in, func() {}, nil
}

// Handler returns the proxy's HTTP handler: /v1/completions,
// /v1/chat/completions, /v1/models, /health, /metrics, /api/summary (JSON,
// SummaryJSON) and the dashboard page (/dashboard/, / redirects to it).
func (p *Proxy) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { // the engine's 404, same JSON shape
		httpjson.Error(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	mux.HandleFunc("/v1/completions", p.serveGenerate)
	mux.HandleFunc("/v1/chat/completions", p.serveGenerate)
	mux.HandleFunc("/v1/models", p.serveModels)
	mux.HandleFunc("/health", p.serveHealth)
	mux.Handle("/metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/summary", p.serveSummary)
	dashboard.Mount(mux, dashboard.Proxy)
	return mux
}

type instanceStatus struct {
	Role     string `json:"role"`
	URL      string `json:"url"`
	Healthy  bool   `json:"healthy"`
	InFlight int64  `json:"inflight"`
	EngineID string `json:"engine_id,omitempty"`
	Error    string `json:"error,omitempty"`
}

func (p *Proxy) serveHealth(w http.ResponseWriter, r *http.Request) {
	var st []instanceStatus
	for _, in := range append(append([]*instance{}, p.prefill...), p.decode...) {
		h, eid, le := in.snapshot()
		st = append(st, instanceStatus{Role: in.role, URL: in.url, Healthy: h, InFlight: in.inflight.Load(), EngineID: eid, Error: le})
	}
	status := p.health()
	code := http.StatusOK
	if status == "unavailable" {
		code = http.StatusServiceUnavailable
	}
	httpjson.Write(w, code, map[string]any{"status": status, "instances": st})
}

// health is the proxy's state as /health and /api/summary name it:
// "unavailable" without a healthy instance of each role, "degraded" when
// not Ready, else "ok".
func (p *Proxy) health() string {
	okP, okD := false, false
	for _, in := range p.prefill {
		h, _, _ := in.snapshot()
		okP = okP || h
	}
	for _, in := range p.decode {
		h, _, _ := in.snapshot()
		okD = okD || h
	}
	switch {
	case !okP || !okD:
		return "unavailable"
	case !p.Ready():
		return "degraded"
	}
	return "ok"
}

func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request) {
	in, _, err := p.choose(&RoundRobin{}, RoleDecode, p.decode, nil, 0)
	if err != nil {
		httpjson.Error(w, http.StatusServiceUnavailable, "service_unavailable", err.Error())
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, in.url+"/v1/models", nil)
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		httpjson.Error(w, http.StatusBadGateway, "upstream_error", fmt.Sprintf("decode instance %s: %v", in.url, err))
		return
	}
	defer resp.Body.Close()
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

type prefillResult struct {
	status int
	body   []byte
	err    error
}

// serveGenerate is the P/D dispatch: both halves are sent at once; decode's
// bytes are relayed to the client unchanged.
func (p *Proxy) serveGenerate(w http.ResponseWriter, r *http.Request) {
	endpoint := r.URL.Path
	code := p.generate(w, r, endpoint)
	p.mRequests.WithLabelValues(endpoint, fmt.Sprint(code)).Inc()
}

func (p *Proxy) generate(w http.ResponseWriter, r *http.Request, endpoint string) int {
	req, code := p.readRequest(w, r)
	if req == nil {
		return code
	}
	// Prompt length in tokens ~ bytes (the byte-level tokenizer; see Conductor).
	prompt := PromptText(endpoint, req)
	blocks, promptTokens := PromptBlocks(prompt, p.cfg.BlockBytes), len(prompt)
	if p.events != nil {
		toks := PromptTokens(endpoint, req)
		blocks, promptTokens = kvevents.PromptBlocks("", p.cfg.EventBlockSize, toks), len(toks)
	}
	pre, preDoneQueue, err := p.choose(p.pPol, RolePrefill, p.prefill, blocks, promptTokens)
	if err != nil {
		return writeChooseError(w, err)
	}
	dec, decDoneQueue, err := p.choose(p.dPol, RoleDecode, p.decode, blocks, promptTokens)
	if err != nil {
		preDoneQueue()
		return writeChooseError(w, err)
	}
	defer decDoneQueue()
	defer p.pairs.start(pre.url, dec.url)()
	x := p.newExchange(r, endpoint, req, pre, dec)
	defer x.decCancel(nil)
	p.startPrefill(x, preDoneQueue)
	return p.relayDecode(w, x)
}

// readRequest reads and parses the client's JSON object; on failure it
// writes the error and returns nil and the status.
func (p *Proxy) readRequest(w http.ResponseWriter, r *http.Request) (map[string]any, int) {
	if r.Method != http.MethodPost {
		return nil, httpjson.Error(w, http.StatusMethodNotAllowed, "invalid_request_error", "use POST")
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, httpjson.Error(w, http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf("request body over %d bytes", mbe.Limit))
		}
		return nil, httpjson.Error(w, http.StatusBadRequest, "invalid_request_error", "reading body: "+err.Error())
	}
	req, err := decodeObject(raw)
	if err != nil {
		return nil, httpjson.Error(w, http.StatusBadRequest, "invalid_request_error", err.Error())
	}
	return req, 0
}

// exchange is one P/D request in flight: its two halves and who answers
// the client.
type exchange struct {
	r                *http.Request
	endpoint         string
	req              map[string]any
	pre, dec         *instance
	tid              string // the pairing key (Halves.Key)
	hdr              http.Header
	preBody, decBody []byte // decBody nil: built from prefill's answer (vllm-seed)
	t0               time.Time

	// The decode half dies with the client (r.Context()). The prefill half
	// outlives this handler (its blocks must be computed for the pull), but
	// is cancelled if the client goes away or the proxy stops.
	decCtx       context.Context
	decCancel    context.CancelCauseFunc
	preCtx       context.Context
	preCancel    context.CancelFunc
	stopOnClient func() bool
	preDone      chan prefillResult

	mu        sync.Mutex
	committed bool // decode's answer is being relayed
	rejected  bool // prefill's 4xx cancelled decode
}

func (p *Proxy) newExchange(r *http.Request, endpoint string, req map[string]any, pre, dec *instance) *exchange {
	_, engineID, _ := pre.snapshot()
	h, _ := BuildHalves(p.cfg.Protocol, req, Target{Bootstrap: pre.bootstrap, EngineID: engineID}, uuid.NewString(), rand.Uint64())
	x := &exchange{r: r, endpoint: endpoint, req: req, pre: pre, dec: dec, tid: h.Key, hdr: r.Header,
		t0: p.cfg.Clock.Now(), preDone: make(chan prefillResult, 1)}
	x.preBody, x.decBody = h.Prefill, h.Decode
	if h.RequestID != "" {
		x.hdr = r.Header.Clone()
		x.hdr.Set("X-Request-Id", h.RequestID)
	}
	x.decCtx, x.decCancel = context.WithCancelCause(r.Context())
	x.preCtx, x.preCancel = p.life.detach(r.Context(), p.cfg.RequestTimeout)
	x.stopOnClient = context.AfterFunc(r.Context(), x.preCancel)
	return x
}

// startPrefill sends the prefill half in the background; a 4xx answer
// cancels the decode half unless decode's answer is already being relayed.
func (p *Proxy) startPrefill(x *exchange, doneQueue func()) {
	x.pre.inflight.Add(1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer x.preCancel()
		defer x.pre.inflight.Add(-1)
		defer doneQueue()
		res := p.post(x.preCtx, x.pre, x.endpoint, x.preBody, x.hdr, true)
		if res.err == nil && res.status >= 400 && res.status < 500 {
			x.mu.Lock()
			if !x.committed {
				x.rejected = true
				x.decCancel(errPrefillRejected)
			}
			x.mu.Unlock()
		}
		if res.err != nil && x.preCtx.Err() == nil {
			p.log.Warn("prefill half failed", "instance", x.pre.url, "transfer_id", x.tid, "err", res.err)
		}
		x.preDone <- res
	}()
}

// relayDecode sends the decode half and answers the client: prefill's
// refusal, a 502 for a failed decode, or decode's bytes unchanged.
func (p *Proxy) relayDecode(w http.ResponseWriter, x *exchange) int {
	if x.decBody == nil {
		if code, done := p.seedDecode(w, x); done {
			return code
		}
	}
	x.dec.inflight.Add(1)
	defer x.dec.inflight.Add(-1)
	resp, err := p.send(x.decCtx, x.dec, x.endpoint, x.decBody, x.hdr)
	x.mu.Lock()
	if err == nil && !x.rejected {
		x.committed = true
	}
	wasRejected := x.rejected
	x.mu.Unlock()
	switch {
	case wasRejected:
		if resp != nil {
			resp.Body.Close()
		}
		return p.answerRejected(w, x)
	case err != nil:
		return p.decodeFailed(w, x, err)
	}
	defer resp.Body.Close()
	p.mTTFB.Observe(p.cfg.Clock.Now().Sub(x.t0).Seconds())
	if resp.StatusCode >= 500 {
		p.mUpErrors.WithLabelValues(RoleDecode, x.dec.url).Inc()
	}
	if resp.StatusCode >= 400 {
		// Decode refused the request, so it will never pull: prefill must
		// not hold the blocks until its abort timeout.
		p.release(x.pre, x.tid)
	}
	copyHeaders(w.Header(), resp.Header)
	w.Header().Set("X-Transfer-Id", x.tid)
	w.WriteHeader(resp.StatusCode)
	stream(w, resp.Body)
	if x.r.Context().Err() != nil {
		// The client went away mid-answer: decode's request is cancelled with
		// r.Context(), the prefill half by stopOnClient; tell prefill's
		// registry to drop the transfer too.
		p.mDisconnect.Inc()
		p.release(x.pre, x.tid)
		return 499
	}
	x.stopOnClient()
	return resp.StatusCode
}

// seedDecode waits for the prefill half of a vllm-seed exchange and builds
// the decode half from its answer. done means the client was answered
// (prefill's refusal, 502, or 499 for a client gone).
func (p *Proxy) seedDecode(w http.ResponseWriter, x *exchange) (int, bool) {
	var res prefillResult
	select {
	case res = <-x.preDone:
	case <-x.r.Context().Done():
		p.mDisconnect.Inc()
		p.release(x.pre, x.tid)
		return 499, true
	}
	x.stopOnClient()
	switch {
	case res.err != nil:
		return httpjson.Error(w, http.StatusBadGateway, "upstream_error", fmt.Sprintf("prefill instance %s failed: %v", x.pre.url, res.err)), true
	case res.status >= 400:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(res.status)
		w.Write(res.body)
		return res.status, true
	}
	body, err := SeedDecodeBody(x.req, res.body)
	if err != nil {
		p.release(x.pre, x.tid)
		return httpjson.Error(w, http.StatusBadGateway, "upstream_error", fmt.Sprintf("prefill instance %s: %v", x.pre.url, err)), true
	}
	x.decBody = body
	return 0, false
}

// answerRejected relays prefill's refusal (a 4xx) to the client.
func (p *Proxy) answerRejected(w http.ResponseWriter, x *exchange) int {
	res := <-x.preDone
	x.stopOnClient()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(res.status)
	w.Write(res.body)
	return res.status
}

// decodeFailed handles a decode half that got no answer: the client went
// away (499) or the instance failed (502, out of rotation); either way
// prefill's blocks are released.
func (p *Proxy) decodeFailed(w http.ResponseWriter, x *exchange, err error) int {
	if x.r.Context().Err() != nil {
		p.mDisconnect.Inc()
		p.release(x.pre, x.tid)
		return 499
	}
	p.mUpErrors.WithLabelValues(RoleDecode, x.dec.url).Inc()
	p.markDown(x.dec, err)
	x.stopOnClient()
	x.preCancel()
	p.release(x.pre, x.tid)
	return httpjson.Error(w, http.StatusBadGateway, "upstream_error", fmt.Sprintf("decode instance %s failed: %v", x.dec.url, err))
}

// stream copies body to w, flushing after every read, until either ends.
func stream(w http.ResponseWriter, body io.Reader) {
	rc := http.NewResponseController(w)
	rc.Flush()
	buf := make([]byte, 32<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if rerr != nil {
			return
		}
	}
}

// release asks pre's bootstrap registry to free the blocks of transfer tid
// (best effort, bounded, in the background).
func (p *Proxy) release(pre *instance, tid string) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := p.life.detach(context.Background(), p.cfg.HealthTimeout)
		defer cancel()
		body, _ := json.Marshal(map[string]string{"transfer_id": tid})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+pre.bootstrap+"/release", bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := p.cfg.Client.Do(req)
		if err != nil {
			return
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
	}()
}

func (p *Proxy) send(ctx context.Context, in *instance, endpoint string, body []byte, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.url+endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range []string{"Authorization", "X-Request-Id", "Accept"} {
		if v := hdr.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	return p.cfg.Client.Do(req)
}

// post sends the prefill half and reads its whole (small) answer.
func (p *Proxy) post(ctx context.Context, in *instance, endpoint string, body []byte, hdr http.Header, markDown bool) prefillResult {
	resp, err := p.send(ctx, in, endpoint, body, hdr)
	if err != nil {
		if ctx.Err() == nil {
			p.mUpErrors.WithLabelValues(in.role, in.url).Inc()
			if markDown {
				p.markDown(in, err)
			}
		}
		return prefillResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 500 {
		p.mUpErrors.WithLabelValues(in.role, in.url).Inc()
	}
	return prefillResult{status: resp.StatusCode, body: b, err: err}
}

// decodeObject parses a JSON object, keeping numbers exact.
func decodeObject(raw []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("request body is not a JSON object: %v", err)
	}
	if m == nil {
		return nil, errors.New("request body is not a JSON object")
	}
	if d.More() {
		return nil, errors.New("request body has trailing data after the JSON object")
	}
	return m, nil
}

// BuildBodies returns the two halves of a P/D request: the prefill body
// (max_tokens 1, no streaming, do_remote_decode) and the decode body (the
// original request plus do_remote_prefill and where to pull from).
func BuildBodies(req map[string]any, transferID, bootstrapAddr, engineID string) (prefill, decode []byte) {
	pb := make(map[string]any, len(req)+2)
	db := make(map[string]any, len(req)+1)
	for k, v := range req {
		pb[k], db[k] = v, v
	}
	pb["max_tokens"] = 1
	if _, ok := pb["max_completion_tokens"]; ok {
		pb["max_completion_tokens"] = 1
	}
	pb["stream"] = false
	delete(pb, "stream_options")
	pb["kv_transfer_params"] = map[string]any{
		"do_remote_decode": true, "do_remote_prefill": false, "transfer_id": transferID,
	}
	db["kv_transfer_params"] = map[string]any{
		"do_remote_decode": false, "do_remote_prefill": true, "transfer_id": transferID,
		"remote_bootstrap_addr": bootstrapAddr, "remote_engine_id": engineID,
	}
	prefill, _ = json.Marshal(pb)
	decode, _ = json.Marshal(db)
	return prefill, decode
}

// PromptTokens is the prompt as our engines tokenize it (the byte-level
// tokenizer: BOS and the text's bytes, the chat template for messages, or
// the token ids given), for the KV-event prefix index.
func PromptTokens(endpoint string, req map[string]any) []int {
	var tk tokenizer.ByteLevel
	if strings.HasSuffix(endpoint, "/chat/completions") {
		msgs, _ := req["messages"].([]any)
		var out []tokenizer.Message
		for _, m := range msgs {
			mm, _ := m.(map[string]any)
			role, _ := mm["role"].(string)
			out = append(out, tokenizer.Message{Role: role, Content: contentText(mm["content"])})
		}
		return tk.ApplyChat(out)
	}
	switch pr := req["prompt"].(type) {
	case string:
		return tk.Encode(pr, true)
	case []any:
		var ids []int
		for _, e := range pr {
			n, ok := e.(json.Number)
			if !ok {
				return nil
			}
			v, err := n.Int64()
			if err != nil {
				return nil
			}
			ids = append(ids, int(v))
		}
		return ids
	}
	return nil
}

// contentText is a chat message's content: the string, or the text parts
// of a list of parts joined; other shapes give "".
func contentText(content any) string {
	var sb strings.Builder
	switch c := content.(type) {
	case string:
		sb.WriteString(c)
	case []any:
		for _, part := range c {
			pm, _ := part.(map[string]any)
			if t, ok := pm["text"].(string); ok {
				sb.WriteString(t)
			}
		}
	}
	return sb.String()
}

// PromptText extracts the prompt text of a completions or chat request, for
// prefix hashing. Unknown shapes give "".
func PromptText(endpoint string, req map[string]any) string {
	var sb strings.Builder
	if strings.HasSuffix(endpoint, "/chat/completions") {
		msgs, _ := req["messages"].([]any)
		for _, m := range msgs {
			mm, _ := m.(map[string]any)
			role, _ := mm["role"].(string)
			sb.WriteString(role)
			sb.WriteByte(0)
			sb.WriteString(contentText(mm["content"]))
			sb.WriteByte(0)
		}
		return sb.String()
	}
	switch pr := req["prompt"].(type) {
	case string:
		return pr
	case []any:
		for _, e := range pr {
			switch v := e.(type) {
			case string:
				sb.WriteString(v)
			case json.Number:
				sb.WriteString(v.String())
				sb.WriteByte(' ')
			case []any:
				for _, t := range v {
					fmt.Fprint(&sb, t, " ")
				}
			}
		}
	}
	return sb.String()
}

var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Transfer-Encoding": true,
	"Te": true, "Trailer": true, "Upgrade": true, "Content-Length": true,
}

func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		if hopHeaders[k] {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

func writeChooseError(w http.ResponseWriter, err error) int {
	if errors.Is(err, ErrOverloaded) || errors.Is(err, ErrTTFTSLO) {
		w.Header().Set("Retry-After", "1")
		return httpjson.Error(w, http.StatusTooManyRequests, "rate_limit_error", err.Error())
	}
	return httpjson.Error(w, http.StatusServiceUnavailable, "service_unavailable", err.Error())
}
