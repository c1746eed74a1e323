package pdconnector

import (
	"fmt"
	"net"
	"strconv"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/kvcache"
)

// hooks are the connector's work that depends on its role. producerHalf
// (prefill: holds a finished prefill's blocks for decode's pull, streams
// them, answers where to pull from) and consumerHalf (decode: pulls) each
// implement what their side does; noHooks is the rest ("not this side's
// request"); bothHalves composes the two for RoleBoth. The Connector's
// engine hooks call its hooks and never look at the role.
type hooks interface {
	// match answers GetNumNewMatchedTokens.
	match(req *engine.ReqState, numLocal int) (int, bool, error)
	// afterAlloc handles UpdateStateAfterAlloc.
	afterAlloc(req *engine.ReqState, blockIDs []int, n int)
	// meta adds this side's work of the step to m (BuildConnectorMeta).
	meta(out *engine.SchedulerOutput, m *stepMeta)
	// finished handles RequestFinished; handled is false when req is not
	// this side's, and a (nil: none) is its response's kv_transfer_params.
	finished(req *engine.ReqState, blockIDs []int) (handled, delayFree bool, a answer)
	// firstToken answers engine.FirstTokenSource.
	firstToken(req *engine.ReqState) (int, float32, bool)
	// registered is told the KV layout (RegisterKVCaches), under c.mu.
	registered(l kvcache.Layout) error
	// servesPulls: the bootstrap listener answers pulls (a producer needs
	// one).
	servesPulls() bool
}

var (
	_ hooks = producerHalf{}
	_ hooks = consumerHalf{}
	_ hooks = bothHalves{}
)

// newHooks are the halves of role.
func newHooks(c *Connector, role string) hooks {
	switch role {
	case RoleProducer:
		return producerHalf{c: c}
	case RoleConsumer:
		return consumerHalf{c: c}
	}
	return bothHalves{consumerHalf: consumerHalf{c: c}, p: producerHalf{c: c}}
}

// noHooks does nothing: no request is this side's.
type noHooks struct{}

func (noHooks) match(*engine.ReqState, int) (int, bool, error)        { return 0, false, nil }
func (noHooks) afterAlloc(*engine.ReqState, []int, int)               {}
func (noHooks) meta(*engine.SchedulerOutput, *stepMeta)               {}
func (noHooks) finished(*engine.ReqState, []int) (bool, bool, answer) { return false, false, nil }
func (noHooks) firstToken(*engine.ReqState) (int, float32, bool)      { return 0, 0, false }
func (noHooks) registered(kvcache.Layout) error                       { return nil }
func (noHooks) servesPulls() bool                                     { return false }

// producerHalf is the prefill side: requests with do_remote_decode.
type producerHalf struct {
	noHooks
	c *Connector
}

func (h producerHalf) servesPulls() bool { return true }

// meta: the prefills this step streams.
func (h producerHalf) meta(out *engine.SchedulerOutput, m *stepMeta) {
	m.saves = h.c.scheduleStreams(out)
}

// registered enables layer-wise streaming (unless WholeRequest) and puts
// the route SGLang's decode engines find the pull address through (GET
// /route).
func (h producerHalf) registered(l kvcache.Layout) error {
	c := h.c
	if !c.cfg.WholeRequest {
		c.prod.EnableStreaming(l.NumLayers, l.BlockSize)
	}
	host, port, _ := net.SplitHostPort(c.cfg.BootstrapAddr)
	p, _ := strconv.Atoi(port)
	if err := c.registry.PutRoute(bootstrap.RouteInfo{RankIP: host, RankPort: p, PageSize: l.BlockSize, KVCacheDType: kvDType}); err != nil {
		return fmt.Errorf("pdconnector: SGLang route: %w", err)
	}
	return nil
}

// finished holds a prefill's blocks for decode's pull and answers where to
// pull from.
func (h producerHalf) finished(req *engine.ReqState, blockIDs []int) (bool, bool, answer) {
	c := h.c
	tid, contract, ok, err := prefillKey(req.ID(), req.KVTransferParams())
	if !ok {
		return false, false, nil
	}
	if err != nil || tid == "" {
		return true, false, nil
	}
	n := len(req.PromptTokens())
	c.mu.Lock()
	delay := c.prod.Finished(tid, req.ID(), blockIDs, n, req.NumComputedTokens() >= n, c.clock.Now())
	if all, lps := req.AllTokens(), req.OutputLogprobs(); delay && len(all) > n && len(lps) > 0 {
		c.prod.SetAux(tid, bootstrap.Aux{FirstToken: all[n], FirstLogprob: lps[0]})
	}
	c.mu.Unlock()
	host, port, _ := net.SplitHostPort(c.cfg.BootstrapAddr)
	p, _ := strconv.Atoi(port)
	a := prefillAnswer{TransferID: tid, EngineID: c.cfg.EngineID, BootstrapAddr: c.cfg.BootstrapAddr,
		Host: host, Port: p, TPSize: c.layout.TPSize(), BlockIDs: blockIDs, SGLang: contract == ContractSGLang}
	return true, delay, a
}

// consumerHalf is the decode side: requests with do_remote_prefill.
type consumerHalf struct {
	noHooks
	c *Connector
}

func (h consumerHalf) match(req *engine.ReqState, numLocal int) (int, bool, error) {
	if _, ok, err := ParseRemote(req.ID(), req.KVTransferParams()); !ok || err != nil {
		return 0, false, err
	}
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	n, async := h.c.cons.Match(req.ID(), len(req.PromptTokens()), numLocal)
	return n, async, nil
}

func (h consumerHalf) afterAlloc(req *engine.ReqState, blockIDs []int, n int) {
	rp, ok, err := ParseRemote(req.ID(), req.KVTransferParams())
	if !ok || err != nil {
		return
	}
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	h.c.cons.AfterAlloc(req.ID(), rp, len(req.PromptTokens()), req.NumComputedTokens(), blockIDs, n)
}

// meta: the step's new pulls; its will-not-pull releases are sent.
func (h consumerHalf) meta(_ *engine.SchedulerOutput, m *stepMeta) {
	h.c.mu.Lock()
	pulls, rels := h.c.cons.TakeWork()
	h.c.mu.Unlock()
	for _, r := range rels {
		h.c.sendRelease(r)
	}
	m.pulls = pulls
}

func (h consumerHalf) firstToken(req *engine.ReqState) (int, float32, bool) {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	aux, ok := h.c.cons.FirstToken(req.ID())
	return aux.FirstToken, aux.FirstLogprob, ok
}

// finished keeps a decode request's blocks while a pull may still write
// into them, tells prefill when it will not pull, and reports the load.
func (h consumerHalf) finished(req *engine.ReqState, _ []int) (bool, bool, answer) {
	c := h.c
	rp, ok, _ := ParseRemote(req.ID(), req.KVTransferParams())
	if !ok {
		return false, false, nil
	}
	c.mu.Lock()
	delay, rel, rep := c.cons.Finished(req.ID(), rp)
	c.mu.Unlock()
	a := decodeAnswer{LoadReport: rep}
	if aux, ok := rep.FirstToken(); ok {
		// Prefill's sampled first token against ours: taken as is when the
		// whole prompt arrived (first_token_from_prefill); otherwise decode
		// computed its own, equal for greedy decoding on compatible engines
		// (a check of the whole transfer).
		all, n := req.AllTokens(), len(req.PromptTokens())
		match := len(all) > n && all[n] == aux.FirstToken
		a.AuxMatch = &match
		if !match && len(all) > n {
			c.m.auxMismatch.Inc()
		}
	}
	if req.NumOutputTokens() > 0 {
		from := req.FirstTokenFromConnector()
		a.FromPrefill = &from
		src := "decode"
		if from {
			src = "prefill"
		}
		c.m.firstToken.WithLabelValues(src).Inc()
	}
	if rel != nil {
		c.sendRelease(*rel)
	}
	c.m.loads.WithLabelValues(rep.Load).Inc()
	return true, delay, a
}

// bothHalves is RoleBoth: a consumer that is also a producer.
type bothHalves struct {
	consumerHalf
	p producerHalf
}

func (h bothHalves) servesPulls() bool                 { return true }
func (h bothHalves) registered(l kvcache.Layout) error { return h.p.registered(l) }

func (h bothHalves) meta(out *engine.SchedulerOutput, m *stepMeta) {
	h.p.meta(out, m)
	h.consumerHalf.meta(out, m)
}

// finished: a prefill half is the producer's, whatever else it carries.
func (h bothHalves) finished(req *engine.ReqState, blockIDs []int) (bool, bool, answer) {
	if handled, delay, out := h.p.finished(req, blockIDs); handled {
		return handled, delay, out
	}
	return h.consumerHalf.finished(req, blockIDs)
}
