package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/httpjson"
	"github.com/kvcache-go/mooncake/internal/httpserve"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
)

// Config configures a Server.
type Config struct {
	// Engine is required; Serve runs it.
	Engine *engine.Engine
	// ModelName is the id clients use in "model" (default: the engine's
	// model name). Requests naming another model get 404.
	ModelName string
	// Tokenizer encodes text prompts (the byte-level tokenizer).
	Tokenizer tokenizer.ByteLevel
	// DefaultMaxTokens applies to completions without max_tokens (16, as
	// OpenAI); chat requests default to the rest of the context, at most 1024.
	DefaultMaxTokens int
	// ShutdownTimeout bounds graceful HTTP shutdown (5s).
	ShutdownTimeout time.Duration
	// Logger (slog.Default()).
	Logger *slog.Logger
	// Clock is the clock (the real one).
	Clock clock.Clock
	// PrepareKV, when set, checks and completes a request's
	// kv_transfer_params before it is queued (the KV connector's
	// PrepareParams): an error is a 400 naming the problem; prefillOnly
	// caps the request at one output token (an SGLang prefill half).
	PrepareKV func(params map[string]any) (out map[string]any, prefillOnly bool, err error)
}

// Validate checks c after defaults.
func (c *Config) Validate() error {
	if c.Engine == nil {
		return errors.New("server: Config.Engine is required")
	}
	if c.DefaultMaxTokens < 0 || c.ShutdownTimeout < 0 {
		return errors.New("server: negative limit")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.ModelName == "" && c.Engine != nil {
		c.ModelName = c.Engine.Config().ModelName
	}
	if c.DefaultMaxTokens == 0 {
		c.DefaultMaxTokens = 16
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Clock = clock.Or(c.Clock)
}

// Server is the OpenAI-compatible HTTP front of one engine.
type Server struct {
	cfg     Config
	eng     *engine.Engine
	mux     *http.ServeMux
	ready   atomic.Bool
	reg     *prometheus.Registry
	ttft    prometheus.Histogram
	tpot    prometheus.Histogram
	e2e     prometheus.Histogram
	reqs    *prometheus.CounterVec
	created int64
}

// New builds a server; nothing runs until Serve.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, eng: cfg.Engine, mux: http.NewServeMux(), reg: prometheus.NewRegistry(), created: cfg.Clock.Now().Unix()}
	s.initMetrics()
	s.mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("POST /tokenize", s.handleTokenize)
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Error(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	return s, nil
}

// Handler is the HTTP handler (usable without Serve, for example with
// httptest, as long as the engine is run by someone).
func (s *Server) Handler() http.Handler { return s.mux }

// Registry holds the server's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Serve runs the engine and serves HTTP on ln until ctx ends, then aborts
// in-flight requests, shuts the listener down and returns. /health answers
// 200 while it serves.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	engCtx, stopEngine := context.WithCancel(context.Background())
	engDone := make(chan error, 1)
	go func() { engDone <- s.eng.Run(engCtx) }()
	hs := httpserve.NewServer(s.mux)
	hs.ErrorLog = slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn)
	httpDone := make(chan error, 1)
	go func() { httpDone <- hs.Serve(ln) }()
	s.ready.Store(true)
	s.cfg.Logger.Info("serving", "addr", ln.Addr().String(), "model", s.cfg.ModelName, "role", s.eng.Config().Role)
	var err error
	select {
	case <-ctx.Done():
	case err = <-httpDone:
		httpDone <- err
	}
	s.ready.Store(false)
	stopEngine() // aborts every request, so handlers return promptly
	engErr := <-engDone
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	_ = hs.Shutdown(sctx) // closes what is left when sctx ends
	if herr := <-httpDone; herr != nil && !errors.Is(herr, http.ErrServerClosed) && err == nil {
		err = herr
	}
	if err == nil && engErr != nil {
		err = engErr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// SetReady marks the server ready when the engine is run by the caller
// (tests that use Handler without Serve).
func (s *Server) SetReady(ok bool) { s.ready.Store(ok) }

func (s *Server) initMetrics() {
	buckets := []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	s.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mooncake_engine_time_to_first_token_seconds",
		Help: "Time from request arrival to its first generated token.", Buckets: buckets})
	s.tpot = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mooncake_engine_time_per_output_token_seconds",
		Help: "Mean time between generated tokens after the first, per request.", Buckets: buckets})
	s.e2e = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mooncake_engine_request_duration_seconds",
		Help: "Time from request arrival to its last token.", Buckets: buckets})
	s.reqs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mooncake_engine_requests_total",
		Help: "Finished requests by finish reason (stop, length, abort, error, rejected)."}, []string{"finish_reason"})
	st := func(f func(engine.Stats) float64) func() float64 { return func() float64 { return f(s.eng.Stats()) } }
	gauge := func(name, help string, f func(engine.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, st(f))
	}
	counter := func(name, help string, f func(engine.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, st(f))
	}
	s.reg.MustRegister(s.ttft, s.tpot, s.e2e, s.reqs,
		gauge("mooncake_engine_requests_running", "Requests being computed.", func(x engine.Stats) float64 { return float64(x.Running) }),
		gauge("mooncake_engine_requests_waiting", "Requests waiting to start (including remote KV loads).", func(x engine.Stats) float64 { return float64(x.Waiting + x.WaitingForRemote) }),
		gauge("mooncake_engine_kv_blocks_used", "KV blocks referenced by requests.", func(x engine.Stats) float64 { return float64(x.BlocksUsed) }),
		gauge("mooncake_engine_kv_blocks_free", "KV blocks free (including reusable cached ones).", func(x engine.Stats) float64 { return float64(x.BlocksFree) }),
		gauge("mooncake_engine_kv_blocks_cached", "KV blocks holding a reusable prefix.", func(x engine.Stats) float64 { return float64(x.BlocksCached) }),
		gauge("mooncake_engine_prefix_cache_hit_rate", "Prompt tokens found in the local prefix cache / prompt tokens looked up.", func(x engine.Stats) float64 {
			if x.PrefixQueriedTokens == 0 {
				return 0
			}
			return float64(x.PrefixHitTokens) / float64(x.PrefixQueriedTokens)
		}),
		counter("mooncake_engine_prompt_tokens_computed_total", "Prompt tokens computed by the model.", func(x engine.Stats) float64 { return float64(x.PromptTokens) }),
		counter("mooncake_engine_generation_tokens_total", "Tokens generated.", func(x engine.Stats) float64 { return float64(x.GeneratedTokens) }),
		counter("mooncake_engine_external_tokens_total", "Prompt tokens supplied by the KV connector.", func(x engine.Stats) float64 { return float64(x.ExternalTokens) }),
		counter("mooncake_engine_connector_first_tokens_total", "First output tokens taken from the KV connector with the KV (prefill's, not computed here); included in generation tokens.", func(x engine.Stats) float64 { return float64(x.FirstTokensFromConnector) }),
		counter("mooncake_engine_preemptions_total", "Requests preempted for lack of KV blocks.", func(x engine.Stats) float64 { return float64(x.Preemptions) }),
	)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() {
		httpjson.Error(w, http.StatusServiceUnavailable, "unavailable", "not ready")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"status":"ok"}` + "\n"))
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	httpjson.Write(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
		"id": s.cfg.ModelName, "object": "model", "created": s.created, "owned_by": "mooncake",
		"max_model_len": s.eng.Config().MaxModelLen,
	}}})
}

// errorStatus is the one table from errors to HTTP statuses.
func errorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, ErrBadRequest), errors.Is(err, engine.ErrInvalidRequest):
		return http.StatusBadRequest, "invalid_request_error"
	case errors.Is(err, ErrUnknownModel):
		return http.StatusNotFound, "not_found_error"
	case errors.Is(err, engine.ErrQueueFull):
		return http.StatusTooManyRequests, "rate_limit_error"
	case errors.Is(err, engine.ErrClosed):
		return http.StatusServiceUnavailable, "unavailable"
	}
	return http.StatusInternalServerError, "internal_error"
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	code, typ := errorStatus(err)
	if code == http.StatusTooManyRequests {
		s.reqs.WithLabelValues("rejected").Inc()
	}
	httpjson.ErrorOf(w, code, typ, err)
}

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// job is one validated request ready for the engine.
type job struct {
	kind       string // "text_completion" or "chat.completion"
	req        engine.Request
	stream     bool
	usageInSSE bool
	stops      []string
	returnToks bool
	arrived    time.Time
}

func (s *Server) buildParams(c *commonParams, promptLen, defMax int) (engine.SamplingParams, error) {
	var p engine.SamplingParams
	if c.Model != "" && c.Model != s.cfg.ModelName {
		return p, httpjson.Param("model", fmt.Errorf("%w: the model %q does not exist (this server serves %q)", ErrUnknownModel, c.Model, s.cfg.ModelName))
	}
	switch {
	case c.N != nil && *c.N != 1:
		return p, httpjson.Param("n", fmt.Errorf("%w: n must be 1", ErrBadRequest))
	case c.TopP != nil && (*c.TopP <= 0 || *c.TopP > 1):
		return p, httpjson.Param("top_p", fmt.Errorf("%w: top_p must be in (0, 1]", ErrBadRequest))
	case len(c.Logprobs) > 0 && string(c.Logprobs) != "null" && string(c.Logprobs) != "false":
		return p, httpjson.Param("logprobs", fmt.Errorf("%w: logprobs are not supported", ErrBadRequest))
	case (c.PresencePenalty != nil && *c.PresencePenalty != 0) || (c.FrequencyPenalty != nil && *c.FrequencyPenalty != 0):
		return p, fmt.Errorf("%w: presence/frequency penalties are not supported", ErrBadRequest)
	case len(c.LogitBias) > 0:
		return p, httpjson.Param("logit_bias", fmt.Errorf("%w: logit_bias is not supported", ErrBadRequest))
	}
	maxLen := s.eng.Config().MaxModelLen
	mt := c.MaxTokens
	if c.MaxCompletionTokens != nil {
		mt = c.MaxCompletionTokens
	}
	prefillOnly, err := s.prepareKV(c)
	if err != nil {
		return p, err
	}
	if prefillOnly {
		one := 1
		mt = &one
	}
	switch {
	case mt == nil:
		p.MaxTokens = max(1, min(defMax, maxLen-promptLen))
	case *mt <= 0:
		return p, httpjson.Param("max_tokens", fmt.Errorf("%w: max_tokens must be at least 1, got %d", ErrBadRequest, *mt))
	case *mt > maxLen:
		return p, httpjson.Param("max_tokens", fmt.Errorf("%w: max_tokens %d is larger than the context of %d tokens", ErrBadRequest, *mt, maxLen))
	default:
		p.MaxTokens = *mt
	}
	p.Temperature = 1
	if c.Temperature != nil {
		if *c.Temperature < 0 || *c.Temperature > 2 {
			return p, httpjson.Param("temperature", fmt.Errorf("%w: temperature must be in [0, 2]", ErrBadRequest))
		}
		p.Temperature = *c.Temperature
	}
	if c.TopP != nil {
		p.TopP = *c.TopP
	}
	if c.Seed != nil {
		v := uint64(*c.Seed)
		p.Seed = &v
	}
	if len(c.Stop) > 4 {
		return p, httpjson.Param("stop", fmt.Errorf("%w: at most 4 stop sequences", ErrBadRequest))
	}
	for _, st := range c.Stop {
		if st == "" {
			return p, httpjson.Param("stop", fmt.Errorf("%w: empty stop sequence", ErrBadRequest))
		}
		p.StopSequences = append(p.StopSequences, s.cfg.Tokenizer.Encode(st, false))
	}
	p.IgnoreEOS = c.IgnoreEOS
	return p, nil
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.handle(w, r, s.parseCompletion, "cmpl-")
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.handle(w, r, s.parseChat, "chatcmpl-")
}

// handle parses r's body (bounded) with parse, under a request id with
// idPrefix, and runs the job.
func (s *Server) handle(w http.ResponseWriter, r *http.Request, parse func(io.Reader, string) (*job, error), idPrefix string) {
	arrived := s.cfg.Clock.Now()
	j, err := parse(http.MaxBytesReader(w, r.Body, maxBody+1), requestID(r, idPrefix))
	if err != nil {
		s.fail(w, err)
		return
	}
	j.arrived = arrived
	s.run(w, r, j)
}

// parseCompletion decodes and validates a /v1/completions body.
func (s *Server) parseCompletion(body io.Reader, id string) (*job, error) {
	var req completionRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.Prompt == nil {
		return nil, fmt.Errorf("%w: prompt is required", ErrBadRequest)
	}
	if req.Echo || req.Suffix != nil || (req.BestOf != nil && *req.BestOf != 1) {
		return nil, fmt.Errorf("%w: echo, suffix and best_of are not supported", ErrBadRequest)
	}
	var ids []int
	if req.Prompt.text != nil {
		if *req.Prompt.text == "" {
			return nil, fmt.Errorf("%w: prompt is empty", ErrBadRequest)
		}
		ids = s.cfg.Tokenizer.Encode(*req.Prompt.text, true)
	} else {
		if len(req.Prompt.tokens) == 0 {
			return nil, fmt.Errorf("%w: prompt is empty", ErrBadRequest)
		}
		ids = req.Prompt.tokens
	}
	params, err := s.buildParams(&req.commonParams, len(ids), s.cfg.DefaultMaxTokens)
	if err != nil {
		return nil, err
	}
	return &job{kind: "text_completion", stream: req.Stream, usageInSSE: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		stops: req.Stop, returnToks: req.ReturnTokenIDs,
		req: engine.Request{ID: id, Prompt: ids, Params: params, KVTransferParams: req.KVTransferParams, CacheSalt: req.CacheSalt}}, nil
}

// parseChat decodes and validates a /v1/chat/completions body.
func (s *Server) parseChat(body io.Reader, id string) (*job, error) {
	var req chatRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if len(req.Messages) == 0 {
		return nil, fmt.Errorf("%w: messages must not be empty", ErrBadRequest)
	}
	msgs := make([]tokenizer.Message, 0, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant", "developer", "tool":
		default:
			return nil, fmt.Errorf("%w: messages[%d].role %q is not one of system, user, assistant, developer, tool", ErrBadRequest, i, m.Role)
		}
		msgs = append(msgs, tokenizer.Message{Role: m.Role, Content: string(m.Content)})
	}
	ids := s.cfg.Tokenizer.ApplyChat(msgs)
	params, err := s.buildParams(&req.commonParams, len(ids), 1024)
	if err != nil {
		return nil, err
	}
	return &job{kind: "chat.completion", stream: req.Stream, usageInSSE: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		stops: req.Stop, returnToks: req.ReturnTokenIDs,
		req: engine.Request{ID: id, Prompt: ids, Params: params, KVTransferParams: req.KVTransferParams, CacheSalt: req.CacheSalt}}, nil
}

// prepareKV folds SGLang's bootstrap_host/port/room into
// kv_transfer_params and hands them to Config.PrepareKV.
func (s *Server) prepareKV(c *commonParams) (prefillOnly bool, err error) {
	if string(c.BootstrapPort) == "null" {
		c.BootstrapPort = nil
	}
	if string(c.BootstrapRoom) == "null" {
		c.BootstrapRoom = nil
	}
	if c.BootstrapHost != nil && *c.BootstrapHost == "" && c.BootstrapRoom == nil {
		c.BootstrapHost = nil
	}
	if c.BootstrapHost != nil || c.BootstrapPort != nil || c.BootstrapRoom != nil {
		if c.BootstrapRoom == nil {
			return false, fmt.Errorf("%w: bootstrap_host and bootstrap_port need bootstrap_room", ErrBadRequest)
		}
		if c.KVTransferParams == nil {
			c.KVTransferParams = map[string]any{}
		}
		if c.BootstrapHost != nil {
			c.KVTransferParams["bootstrap_host"] = *c.BootstrapHost
		}
		if c.BootstrapPort != nil {
			port, err := rawInt("bootstrap_port", c.BootstrapPort)
			if err != nil {
				return false, err
			}
			c.KVTransferParams["bootstrap_port"] = port
		}
		room, err := rawInt("bootstrap_room", c.BootstrapRoom)
		if err != nil {
			return false, err
		}
		c.KVTransferParams["bootstrap_room"] = room
	}
	if s.cfg.PrepareKV == nil || c.KVTransferParams == nil {
		return false, nil
	}
	out, prefillOnly, err := s.cfg.PrepareKV(c.KVTransferParams)
	if err != nil {
		return false, fmt.Errorf("%w: kv_transfer_params: %v", ErrBadRequest, err)
	}
	c.KVTransferParams = out
	return prefillOnly, nil
}

// rawInt reads a non-negative integer given as a JSON number or a decimal
// string, exactly (a bootstrap room is a 63-bit integer), as its decimal
// string.
func rawInt(field string, raw json.RawMessage) (string, error) {
	v := strings.TrimSpace(string(raw))
	if uq, err := strconv.Unquote(v); err == nil {
		v = uq
	}
	if _, err := strconv.ParseUint(v, 10, 64); err != nil {
		return "", fmt.Errorf("%w: %s must be a non-negative integer, got %s", ErrBadRequest, field, raw)
	}
	return v, nil
}

// failMessage is a failed request's error message, with the KV
// connector's reason (kv_load_error) when it reported one.
func failMessage(out engine.Output) string {
	msg := fmt.Sprintf("generation failed: %v", out.Err)
	if why, ok := out.KVTransferParams["kv_load_error"].(string); ok && why != "" {
		msg += ": " + why
	}
	return msg
}

// requestID takes X-Request-Id when the client (a proxy) sets one.
func requestID(r *http.Request, prefix string) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 256 {
		return id
	}
	return newID(prefix)
}

// textState turns generated tokens into response text: it holds back bytes
// that might start a stop string or an incomplete UTF-8 character, and trims
// a matched stop string at the end.
type textState struct {
	tk      tokenizer.ByteLevel
	stops   []string
	hold    int
	bytes   []byte
	emitted int
	tokens  []int
}

func newTextState(tk tokenizer.ByteLevel, stops []string) *textState {
	h := 0
	for _, s := range stops {
		h = max(h, len(s)-1)
	}
	return &textState{tk: tk, stops: stops, hold: h}
}

// add appends new tokens and returns the text that is now safe to send.
func (t *textState) add(toks []int) string {
	t.tokens = append(t.tokens, toks...)
	t.bytes = append(t.bytes, t.tk.DecodeBytes(toks)...)
	end := max(t.emitted, len(t.bytes)-t.hold)
	for _, s := range t.stops {
		if strings.HasSuffix(string(t.bytes), s) {
			end = max(t.emitted, min(end, len(t.bytes)-len(s)))
		}
	}
	end = utf8Boundary(t.bytes, t.emitted, end)
	out := validText(string(t.bytes[t.emitted:end]))
	t.emitted = end
	return out
}

// finish returns the rest of the text, without a trailing stop string.
func (t *textState) finish() string {
	end := len(t.bytes)
	for _, s := range t.stops {
		if strings.HasSuffix(string(t.bytes), s) {
			end = max(t.emitted, len(t.bytes)-len(s))
			break
		}
	}
	out := validText(string(t.bytes[t.emitted:end]))
	t.emitted = end
	return out
}

// utf8Boundary moves end back so that b[start:end] does not end inside a
// UTF-8 character (at most 3 bytes back); invalid bytes pass through.
func utf8Boundary(b []byte, start, end int) int {
	for back := 1; back <= 3 && end-back >= start; back++ {
		c := b[end-back]
		if c&0xC0 == 0x80 {
			continue
		}
		if c >= 0xC0 {
			n := 2
			if c >= 0xF0 {
				n = 4
			} else if c >= 0xE0 {
				n = 3
			}
			if back < n {
				return end - back
			}
		}
		break
	}
	return end
}

// validText replaces every byte that is not part of a valid UTF-8
// character with U+FFFD, one per byte, so that text cut at character
// boundaries decodes the same in pieces as whole.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var sb strings.Builder
	for _, r := range s {
		sb.WriteRune(r)
	}
	return sb.String()
}

// run submits the job and writes the response (JSON or SSE).
func (s *Server) run(w http.ResponseWriter, r *http.Request, j *job) {
	st, err := s.eng.Submit(j.req)
	if err != nil {
		s.fail(w, err)
		return
	}
	rm := &reqMetrics{s: s, arrived: j.arrived}
	created := s.cfg.Clock.Now().Unix()
	if j.stream {
		s.runSSE(r.Context(), w, j, st, rm, created)
		return
	}
	s.runJSON(r.Context(), w, j, st, rm, created)
}

// reqMetrics times one request's tokens for the TTFT, TPOT and end-to-end
// histograms.
type reqMetrics struct {
	s           *Server
	arrived     time.Time
	first, last time.Time
	n           int
}

// observe records the tokens of out.
func (m *reqMetrics) observe(out engine.Output) {
	if len(out.NewTokens) == 0 {
		return
	}
	now := m.s.cfg.Clock.Now()
	if m.first.IsZero() {
		m.first = now
		m.s.ttft.Observe(now.Sub(m.arrived).Seconds())
	}
	m.last = now
	m.n += len(out.NewTokens)
}

// finish records the end of the request (out is its last output).
func (m *reqMetrics) finish(out engine.Output) {
	m.s.reqs.WithLabelValues(out.FinishReason).Inc()
	if m.n > 1 {
		m.s.tpot.Observe(m.last.Sub(m.first).Seconds() / float64(m.n-1))
	}
	if !m.last.IsZero() {
		m.s.e2e.Observe(m.last.Sub(m.arrived).Seconds())
	}
}

// runJSON collects the whole answer and writes it as one JSON object.
func (s *Server) runJSON(ctx context.Context, w http.ResponseWriter, j *job, st *engine.Stream, rm *reqMetrics, created int64) {
	ts := newTextState(s.cfg.Tokenizer, j.stops)
	var final engine.Output
	var sb strings.Builder
	for {
		out, ok, err := st.Next(ctx)
		if err != nil {
			s.reqs.WithLabelValues(engine.FinishAbort).Inc()
			return // client went away; the request was aborted
		}
		if !ok {
			break
		}
		rm.observe(out)
		sb.WriteString(ts.add(out.NewTokens))
		if out.Finished {
			final = out
			break
		}
	}
	rm.finish(final)
	if final.FinishReason == engine.FinishError {
		httpjson.Error(w, http.StatusInternalServerError, "internal_error", failMessage(final))
		return
	}
	sb.WriteString(ts.finish())
	full := validText(sb.String())
	reason := final.FinishReason
	resp := response{ID: j.req.ID, Object: j.kind, Created: created, Model: s.cfg.ModelName,
		Usage: usageOf(final), KVTransferParams: final.KVTransferParams}
	var toks []int
	if j.returnToks {
		toks = ts.tokens
		resp.PromptTokenIDs = j.req.Prompt
	}
	if j.kind == "text_completion" {
		resp.Choices = []completionChoice{{Text: full, FinishReason: &reason, TokenIDs: toks}}
	} else {
		resp.Choices = []chatChoice{{Message: &chatDelta{Role: "assistant", Content: &full}, FinishReason: &reason, TokenIDs: toks}}
	}
	httpjson.Write(w, http.StatusOK, resp)
}

// sseWriter writes server-sent events of one request.
type sseWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
	j       *job
	model   string
	created int64
}

// start writes the 200 and the event-stream headers, flushed so that the
// client sees them before the first token.
func (e *sseWriter) start() {
	e.flusher, _ = e.w.(http.Flusher)
	e.w.Header().Set("Content-Type", "text/event-stream")
	e.w.Header().Set("Cache-Control", "no-cache")
	e.w.Header().Set("Connection", "keep-alive")
	e.w.WriteHeader(http.StatusOK)
	e.flush()
}

func (e *sseWriter) flush() {
	if e.flusher != nil {
		e.flusher.Flush()
	}
}

// send writes one event; false if the client is gone.
func (e *sseWriter) send(v any) bool {
	b, _ := json.Marshal(v)
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		return false
	}
	e.flush()
	return true
}

// done writes the final [DONE] event.
func (e *sseWriter) done() {
	fmt.Fprint(e.w, "data: [DONE]\n\n")
	e.flush()
}

// chunk is one streamed piece of the answer.
func (e *sseWriter) chunk(text string, toks []int, reason *string) response {
	if e.j.kind == "text_completion" {
		return response{ID: e.j.req.ID, Object: "text_completion", Created: e.created, Model: e.model,
			Choices: []completionChoice{{Text: text, FinishReason: reason, TokenIDs: toks}}}
	}
	d := &chatDelta{Content: &text}
	return response{ID: e.j.req.ID, Object: "chat.completion.chunk", Created: e.created, Model: e.model,
		Choices: []chatChoice{{Delta: d, FinishReason: reason, TokenIDs: toks}}}
}

// runSSE streams the answer as server-sent events.
func (s *Server) runSSE(ctx context.Context, w http.ResponseWriter, j *job, st *engine.Stream, rm *reqMetrics, created int64) {
	e := &sseWriter{w: w, j: j, model: s.cfg.ModelName, created: created}
	e.start()
	if j.kind == "chat.completion" {
		empty := ""
		if !e.send(response{ID: j.req.ID, Object: "chat.completion.chunk", Created: created, Model: s.cfg.ModelName,
			Choices: []chatChoice{{Delta: &chatDelta{Role: "assistant", Content: &empty}}}}) {
			s.eng.Abort(j.req.ID)
			return
		}
	}
	ts := newTextState(s.cfg.Tokenizer, j.stops)
	for {
		out, ok, err := st.Next(ctx)
		if err != nil {
			s.reqs.WithLabelValues(engine.FinishAbort).Inc()
			return
		}
		if !ok {
			return
		}
		rm.observe(out)
		text := ts.add(out.NewTokens)
		var toks []int
		if j.returnToks {
			toks = out.NewTokens
		}
		if out.Finished {
			rm.finish(out)
			s.sseFinish(e, out, text+ts.finish(), toks)
			return
		}
		if text == "" && len(toks) == 0 {
			continue
		}
		if !e.send(e.chunk(text, toks, nil)) {
			s.eng.Abort(j.req.ID)
			return
		}
	}
}

// sseFinish writes the last chunk (or the error), the usage if asked, and
// [DONE].
func (s *Server) sseFinish(e *sseWriter, out engine.Output, text string, toks []int) {
	if out.FinishReason == engine.FinishError {
		e.send(httpjson.ErrorResponse{Error: httpjson.ErrorBody{Message: failMessage(out), Type: "internal_error", Code: 500}})
		fmt.Fprint(e.w, "data: [DONE]\n\n")
		return
	}
	reason := out.FinishReason
	c := e.chunk(text, toks, &reason)
	c.KVTransferParams = out.KVTransferParams
	e.send(c)
	if e.j.usageInSSE {
		e.send(response{ID: e.j.req.ID, Object: c.Object, Created: e.created, Model: s.cfg.ModelName, Choices: []any{}, Usage: usageOf(out)})
	}
	e.done()
}

func usageOf(o engine.Output) *usage {
	return &usage{PromptTokens: o.NumPromptTokens, CompletionTokens: o.NumOutputTokens,
		TotalTokens: o.NumPromptTokens + o.NumOutputTokens, PromptTokensDetails: &tokensDetails{CachedTokens: o.NumCachedTokens}}
}
