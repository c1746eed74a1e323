package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/kvcache-go/mooncake/internal/httpjson"
)

type prefillResult struct {
	status int
	body   []byte
	err    error
}

// exchange is one P/D request in flight: its two halves and who answers
// the client.
type exchange struct {
	r                *http.Request
	endpoint         string
	req              Body
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

func (p *Proxy) newExchange(r *http.Request, endpoint string, req Body, pre, dec *instance) (*exchange, error) {
	_, engineID, _ := pre.snapshot()
	h, err := BuildHalves(p.cfg.Protocol, req, Target{Bootstrap: pre.bootstrap, EngineID: engineID}, uuid.NewString(), rand.Uint64())
	if err != nil {
		return nil, err
	}
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
	return x, nil
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
