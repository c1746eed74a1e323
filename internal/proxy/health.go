package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/httpjson"
)

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

type instanceStatus struct {
	Role     string `json:"role"`
	URL      string `json:"url"`
	Healthy  bool   `json:"healthy"`
	InFlight int64  `json:"inflight"`
	EngineID string `json:"engine_id,omitempty"`
	Error    string `json:"error,omitempty"`
}

// healthJSON is the /health answer (fields in the order a map gave).
type healthJSON struct {
	Instances []instanceStatus `json:"instances"`
	Status    string           `json:"status"`
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
	httpjson.Write(w, code, healthJSON{Status: status, Instances: st})
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
