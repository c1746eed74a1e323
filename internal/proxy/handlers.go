package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvcache-go/mooncake/internal/dashboard"
	"github.com/kvcache-go/mooncake/internal/httpjson"
	"github.com/kvcache-go/mooncake/internal/kvevents"
)

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

func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request) {
	in, _, err := p.choose(picked{&RoundRobin{}}, RoleDecode, p.decode, nil, 0, nil)
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
	var cached map[string]TierBlocks
	if p.events != nil || p.indexer != nil {
		toks := p.promptTokens(r.Context(), endpoint, req)
		blocks, promptTokens = kvevents.PromptBlocks("", p.cfg.EventBlockSize, toks), len(toks)
		if p.indexer != nil && toks != nil {
			cached = p.queryIndexer(r.Context(), req, toks)
		}
	}
	pre, preDoneQueue, err := p.choose(p.pPol, RolePrefill, p.prefill, blocks, promptTokens, cached)
	if err != nil {
		return writeChooseError(w, err)
	}
	dec, decDoneQueue, err := p.choose(p.dPol, RoleDecode, p.decode, blocks, promptTokens, nil)
	if err != nil {
		preDoneQueue()
		return writeChooseError(w, err)
	}
	defer decDoneQueue()
	defer p.pairs.start(pre.url, dec.url)()
	x, err := p.newExchange(r, endpoint, req, pre, dec)
	if err != nil {
		preDoneQueue()
		return httpjson.Error(w, http.StatusInternalServerError, "internal_error", err.Error())
	}
	defer x.decCancel(nil)
	p.startPrefill(x, preDoneQueue)
	return p.relayDecode(w, x)
}

// readRequest reads and parses the client's JSON object; on failure it
// writes the error and returns nil and the status.
func (p *Proxy) readRequest(w http.ResponseWriter, r *http.Request) (Body, int) {
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

func writeChooseError(w http.ResponseWriter, err error) int {
	if errors.Is(err, ErrOverloaded) || errors.Is(err, ErrTTFTSLO) {
		w.Header().Set("Retry-After", "1")
		return httpjson.Error(w, http.StatusTooManyRequests, "rate_limit_error", err.Error())
	}
	return httpjson.Error(w, http.StatusServiceUnavailable, "service_unavailable", err.Error())
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
