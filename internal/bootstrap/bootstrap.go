package bootstrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/httpjson"
	"github.com/kvcache-go/mooncake/internal/httpserve"
)

// DefaultPort is the bootstrap port of a prefill instance.
const DefaultPort = 8998

// ProtocolVersion is the version of the pull protocol carried in every
// PullRequest; peers with another version are refused.
// Version 2: KV blocks are head major (kvcache.Layout) and a pull may
// cover several tensor-parallel ranks of decode (PullRequest.TPRanks).
const ProtocolVersion = 2

// Sentinel errors.
var (
	ErrConflict   = errors.New("bootstrap: conflicting registration")
	ErrBadRequest = errors.New("bootstrap: bad request")
)

// MaxBody bounds every request body the server reads.
const MaxBody = 4 << 20

// Worker is one registered worker of the prefill engine.
type Worker struct {
	DPRank int    `json:"dp_rank"`
	TPRank int    `json:"tp_rank"`
	PPRank int    `json:"pp_rank"`
	Addr   string `json:"addr"` // its transfer engine segment name, host:port
}

// RegisterRequest is the body of POST /register.
type RegisterRequest struct {
	EngineID string `json:"engine_id"`
	Worker
}

// QueryResponse is the body of GET /query.
type QueryResponse struct {
	EngineID        string `json:"engine_id"`
	CompatHash      string `json:"compat_hash"`
	ProtocolVersion int    `json:"protocol_version"`
	TPSize          int    `json:"tp_size"`
	// KVLayout names the block layout of the engine's KV memory
	// (kvcache.BlockLayout); decode refuses a prefill with another.
	KVLayout string   `json:"kv_layout,omitempty"`
	Workers  []Worker `json:"workers"`
}

// Registry is the pure registry: one engine id, its workers by rank.
type Registry struct {
	mu       sync.Mutex
	engineID string
	compat   string
	tpSize   int
	layout   string
	workers  map[[3]int]Worker
	routes   map[[3]int]RouteInfo // SGLang's PUT /route
}

// NewRegistry returns a registry for engine engineID.
func NewRegistry(engineID, compatHash string, tpSize int) *Registry {
	if tpSize <= 0 {
		tpSize = 1
	}
	return &Registry{engineID: engineID, compat: compatHash, tpSize: tpSize, workers: map[[3]int]Worker{}}
}

// SetCompatHash sets the compatibility hash /query reports (known once the
// engine's KV layout is).
func (r *Registry) SetCompatHash(h string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.compat = h
}

// SetTP sets the engine's tensor-parallel size and KV block layout, which
// /query reports (known once the engine's KV layout is). Call it before
// registering the workers of ranks beyond 0.
func (r *Registry) SetTP(tpSize int, kvLayout string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tpSize, r.layout = max(1, tpSize), kvLayout
}

// Register adds a worker. Registering another engine id, a rank twice with
// a different address, or a rank outside the TP size fails with ErrConflict
// or ErrBadRequest; the same registration twice is idempotent.
func (r *Registry) Register(req RegisterRequest) error {
	if req.EngineID == "" || req.Addr == "" {
		return fmt.Errorf("%w: engine_id and addr are required", ErrBadRequest)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.DPRank < 0 || req.PPRank < 0 || req.TPRank < 0 || req.TPRank >= r.tpSize {
		return fmt.Errorf("%w: rank out of range (tp_size %d)", ErrBadRequest, r.tpSize)
	}
	if req.EngineID != r.engineID {
		return fmt.Errorf("%w: engine id %q, this registry serves %q", ErrConflict, req.EngineID, r.engineID)
	}
	k := [3]int{req.DPRank, req.TPRank, req.PPRank}
	if w, ok := r.workers[k]; ok && w.Addr != req.Addr {
		return fmt.Errorf("%w: rank dp=%d tp=%d pp=%d already registered at %s", ErrConflict, req.DPRank, req.TPRank, req.PPRank, w.Addr)
	}
	r.workers[k] = req.Worker
	return nil
}

// Query returns the registry's content, workers sorted by rank.
func (r *Registry) Query() QueryResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := QueryResponse{EngineID: r.engineID, CompatHash: r.compat, ProtocolVersion: ProtocolVersion, TPSize: r.tpSize, KVLayout: r.layout, Workers: []Worker{}}
	for _, w := range r.workers {
		q.Workers = append(q.Workers, w)
	}
	sort.Slice(q.Workers, func(i, j int) bool {
		a, b := q.Workers[i], q.Workers[j]
		if a.DPRank != b.DPRank {
			return a.DPRank < b.DPRank
		}
		if a.TPRank != b.TPRank {
			return a.TPRank < b.TPRank
		}
		return a.PPRank < b.PPRank
	})
	return q
}

// PullRequest is decode's request (POST /pull): push the KV blocks of
// TransferID into my memory. It carries decode's compatibility hash,
// protocol version, tensor-parallel shape and KV layout; prefill maps its
// ranks' heads onto decode's.
type PullRequest struct {
	TransferID      string `json:"transfer_id"`
	ProtocolVersion int    `json:"protocol_version"`
	CompatHash      string `json:"compat_hash"`
	// TPSize is decode's TP size; the pull covers its ranks [TPRank,
	// TPRank+TPRanks) (TPRanks 0 means 1; our engines send every rank in
	// one pull).
	TPSize  int `json:"tp_size"`
	TPRank  int `json:"tp_rank"`
	TPRanks int `json:"tp_ranks,omitempty"`
	// KVLayout is decode's block layout (kvcache.BlockLayout).
	KVLayout string `json:"kv_layout,omitempty"`
	// Segment is decode's transfer engine segment name.
	Segment string `json:"segment"`
	// LayerAddrs are the base addresses of decode's layer regions, rank
	// major: rank TPRank's layers 0..L-1, then rank TPRank+1's, ...
	LayerAddrs []uint64 `json:"layer_addrs"`
	// BlockBytes is decode's block stride in one rank's region: its heads
	// per rank times the bytes of one head's K and V in a block.
	BlockBytes int `json:"block_bytes"`
	// NumTokens is the prompt length. Block index i holds tokens
	// [i*BlockSize, (i+1)*BlockSize).
	NumTokens int `json:"num_tokens"`
	// FirstBlock is the first block index decode lacks (its prefix-cache
	// hit, in blocks); BlockIDs are decode's destination blocks for block
	// indices FirstBlock, FirstBlock+1, ... Empty BlockIDs = nothing to send
	// (full hit): prefill frees and answers done.
	FirstBlock int   `json:"first_block"`
	BlockIDs   []int `json:"block_ids"`
	// Grants, when decode checks grants, are one-shot grants (package
	// internal/grant) that cover exactly decode's destination blocks of
	// this pull; prefill sends with each WRITE the one that covers it.
	Grants [][]byte `json:"grants,omitempty"`
	// TimeoutMS is how long decode waits for the answer; prefill answers
	// (done or failed) and stops writing before it.
	TimeoutMS int64 `json:"timeout_ms"`
}

// Validate checks the request's shape (not its compatibility).
func (p PullRequest) Validate() error {
	switch {
	case p.TransferID == "" || len(p.TransferID) > 256:
		return fmt.Errorf("%w: transfer_id missing or too long", ErrBadRequest)
	case p.TPSize <= 0 || p.TPRank < 0 || p.TPRanks < 0 || p.TPRank+max(1, p.TPRanks) > p.TPSize:
		return fmt.Errorf("%w: tp_size/tp_rank/tp_ranks %d/%d/%d", ErrBadRequest, p.TPSize, p.TPRank, p.TPRanks)
	case len(p.LayerAddrs)%max(1, p.TPRanks) != 0:
		return fmt.Errorf("%w: %d layer_addrs for %d ranks", ErrBadRequest, len(p.LayerAddrs), max(1, p.TPRanks))
	case p.NumTokens <= 0 || p.FirstBlock < 0 || p.BlockBytes <= 0:
		return fmt.Errorf("%w: num_tokens, first_block, block_bytes must be positive", ErrBadRequest)
	case len(p.BlockIDs) > 0 && (p.Segment == "" || len(p.LayerAddrs) == 0):
		return fmt.Errorf("%w: segment and layer_addrs are required to send blocks", ErrBadRequest)
	case len(p.BlockIDs) > 1<<20 || len(p.LayerAddrs) > 4096:
		return fmt.Errorf("%w: too many blocks or layers", ErrBadRequest)
	case p.TimeoutMS <= 0:
		return fmt.Errorf("%w: timeout_ms must be positive", ErrBadRequest)
	}
	for _, b := range p.BlockIDs {
		if b < 0 {
			return fmt.Errorf("%w: negative block id", ErrBadRequest)
		}
	}
	return nil
}

// Pull answer statuses and failure codes.
const (
	StatusDone   = "done"
	StatusFailed = "failed"

	CodeIncompatible = "incompatible"
	CodeUnknown      = "unknown_transfer"
	CodeTimeout      = "timeout"
	CodeTransfer     = "transfer_failed"
	CodeAborted      = "aborted"
	CodePrefillError = "prefill_failed"
	CodeBadRequest   = "bad_request"
)

// PullResponse is prefill's answer to a PullRequest.
type PullResponse struct {
	Status string `json:"status"`
	Code   string `json:"code,omitempty"`
	Error  string `json:"error,omitempty"`
	Blocks int    `json:"blocks"`
	Bytes  int64  `json:"bytes"`
	// Requests is the number of transfer requests written (one per run of
	// consecutive blocks per layer).
	Requests int `json:"requests"`
	// Nanos is the time prefill spent writing.
	Nanos int64 `json:"nanos"`
	// Layerwise says prefill streamed the KV layer by layer while it
	// computed; TailNanos is then how long its writes ran past the end of
	// the prefill (the part of the transfer not hidden behind compute).
	Layerwise bool  `json:"layerwise,omitempty"`
	TailNanos int64 `json:"tail_nanos,omitempty"`
	// Aux is the prefill's aux data (SGLang ships it with the KV): the
	// first output token it sampled and its logprob.
	Aux *Aux `json:"aux,omitempty"`
}

// Aux is a prefill's aux data: the first output token it sampled and that
// token's logprob (log-softmax of the raw logits). Decode takes the token
// as its first output instead of recomputing the last prompt position.
type Aux struct {
	FirstToken   int     `json:"first_token"`
	FirstLogprob float32 `json:"first_logprob"`
}

// Handler serves pulls and releases; the producer connector implements it.
type Handler interface {
	// Pull waits (bounded) until the transfer's prefill is done, pushes
	// the blocks and answers. It must return before ctx ends.
	Pull(ctx context.Context, req PullRequest) PullResponse
	// Release frees the transfer's blocks: decode will not pull (abort,
	// full hit, client gone). It reports whether the transfer was known.
	Release(transferID string) bool
}

// DecodePull parses and validates a pull request body.
func DecodePull(b []byte) (PullRequest, error) {
	var p PullRequest
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return p, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return p, p.Validate()
}

// Server is the HTTP shell: GET /query, POST /register, POST /pull,
// POST /release, GET /health.
type Server struct {
	Registry *Registry
	Handler  Handler
	// Metrics, if set, serves GET /metrics (the connector's Prometheus text).
	Metrics http.Handler
	Logger  *slog.Logger
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		httpjson.Write(w, 200, map[string]string{"status": "ok"})
	case "/metrics":
		if s.Metrics == nil {
			httpjson.Write(w, 404, map[string]string{"error": "no metrics here"})
			return
		}
		s.Metrics.ServeHTTP(w, r)
	case "/route":
		s.serveRoute(w, r)
	case "/query":
		q := s.Registry.Query()
		if len(q.Workers) == 0 {
			httpjson.Write(w, 503, map[string]string{"error": "no worker registered yet"})
			return
		}
		httpjson.Write(w, 200, q)
	case "/register":
		var req RegisterRequest
		if !readJSON(w, r, &req) {
			return
		}
		if err := s.Registry.Register(req); err != nil {
			httpjson.Write(w, 400, map[string]string{"error": err.Error()})
			return
		}
		httpjson.Write(w, 200, map[string]string{"status": "ok"})
	case "/pull":
		if r.Method != http.MethodPost {
			httpjson.Write(w, 405, map[string]string{"error": "use POST"})
			return
		}
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
		if err != nil {
			httpjson.Write(w, 400, PullResponse{Status: StatusFailed, Code: CodeBadRequest, Error: err.Error()})
			return
		}
		req, err := DecodePull(b)
		if err != nil {
			httpjson.Write(w, 400, PullResponse{Status: StatusFailed, Code: CodeBadRequest, Error: err.Error()})
			return
		}
		if s.Handler == nil {
			httpjson.Write(w, 503, PullResponse{Status: StatusFailed, Code: CodeUnknown, Error: "no producer on this bootstrap server"})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Duration(req.TimeoutMS)*time.Millisecond)
		defer cancel()
		httpjson.Write(w, 200, s.Handler.Pull(ctx, req))
	case "/release":
		var req struct {
			TransferID string `json:"transfer_id"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		if req.TransferID == "" {
			httpjson.Write(w, 400, map[string]string{"error": "transfer_id is required"})
			return
		}
		known := false
		if s.Handler != nil {
			known = s.Handler.Release(req.TransferID)
		}
		httpjson.Write(w, 200, map[string]bool{"known": known})
	default:
		httpjson.Write(w, 404, map[string]string{"error": "unknown path " + r.URL.Path})
	}
}

func readJSON(w http.ResponseWriter, r *http.Request, into any) bool {
	if r.Method != http.MethodPost {
		httpjson.Write(w, 405, map[string]string{"error": "use POST"})
		return false
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBody)).Decode(into); err != nil {
		httpjson.Write(w, 400, map[string]string{"error": "bad JSON: " + err.Error()})
		return false
	}
	return true
}

// Serve serves s on ln until ctx ends, then shuts down (bounded).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return httpserve.Serve(ctx, ln, s, 2*time.Second)
}

// Client talks to bootstrap servers.
type Client struct {
	HTTP *http.Client
}

func (c *Client) do(ctx context.Context, method, url string, body, into any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return resp.StatusCode, err
	}
	if into != nil && len(b) > 0 {
		if err := json.Unmarshal(b, into); err != nil {
			return resp.StatusCode, fmt.Errorf("bootstrap %s: HTTP %d: %s", url, resp.StatusCode, bytes.TrimSpace(b))
		}
	}
	return resp.StatusCode, nil
}

// Query fetches addr's registry.
func (c *Client) Query(ctx context.Context, addr string) (QueryResponse, error) {
	var q QueryResponse
	code, err := c.do(ctx, http.MethodGet, "http://"+addr+"/query", nil, &q)
	if err != nil {
		return q, err
	}
	if code != 200 || len(q.Workers) == 0 {
		return q, fmt.Errorf("bootstrap %s: query: HTTP %d, %d workers", addr, code, len(q.Workers))
	}
	return q, nil
}

// Register registers a worker at addr.
func (c *Client) Register(ctx context.Context, addr string, req RegisterRequest) error {
	var e struct {
		Error string `json:"error"`
	}
	code, err := c.do(ctx, http.MethodPost, "http://"+addr+"/register", req, &e)
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("bootstrap %s: register: %s", addr, e.Error)
	}
	return nil
}

// Pull sends a pull request and waits for the answer (bounded by ctx).
func (c *Client) Pull(ctx context.Context, addr string, req PullRequest) (PullResponse, error) {
	var resp PullResponse
	code, err := c.do(ctx, http.MethodPost, "http://"+addr+"/pull", req, &resp)
	if err != nil {
		return resp, err
	}
	if resp.Status == "" {
		return resp, fmt.Errorf("bootstrap %s: pull: HTTP %d without a status", addr, code)
	}
	return resp, nil
}

// Release tells addr that transferID will not be pulled.
func (c *Client) Release(ctx context.Context, addr, transferID string) error {
	_, err := c.do(ctx, http.MethodPost, "http://"+addr+"/release", map[string]string{"transfer_id": transferID}, nil)
	return err
}
