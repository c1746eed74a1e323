package proxy

import (
	"context"
	"fmt"
)

// choose picks an instance of role for a prompt of promptTokens tokens with
// prefix hashes blocks and, when a remote indexer answered, the prefix
// cached per instance (by indexer instance id; nil: none). done must be called when the request to the chosen
// instance has ended, however it ended (it releases the conductor's queue
// estimate; a no-op for other policies).
func (p *Proxy) choose(pol Policy, role string, pool []*instance, blocks []uint64, promptTokens int, cached map[string]TierBlocks) (_ *instance, done func(), _ error) {
	cands, loads, err := p.candidates(role, pool)
	if err != nil {
		return nil, nil, err
	}
	if cached != nil {
		for i, in := range cands {
			c := cached[in.indexerID()] // absent: nothing cached there
			loads[i].Cached = &c
		}
	}
	plan := pol.Plan(blocks, promptTokens, loads)
	in := cands[plan.Index]
	if slo := p.cfg.TTFTSLO; slo > 0 && plan.TTFT > slo.Seconds() {
		p.mSLO.Inc()
		return nil, nil, fmt.Errorf("%w: predicted time to first token %.3fs exceeds the TTFT SLO %v on every healthy %s instance (best %s: %.3fs queued + %.3fs prefill of %d tokens, %d cached); retry later",
			ErrTTFTSLO, plan.TTFT, slo, role, in.url, plan.Queue, plan.Prefill, promptTokens, plan.PrefixTokens)
	}
	return in, pol.Dispatch(in.url, blocks, plan), nil
}

// candidates are the instances of pool a request may go to, with their
// loads: healthy (prefill: with an engine id where the protocol names it)
// and under Config.MaxInFlight. None is ErrNoInstance or ErrOverloaded.
func (p *Proxy) candidates(role string, pool []*instance) ([]*instance, []Load, error) {
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
	max := p.cfg.MaxInFlight
	if max <= 0 {
		return cands, loads, nil
	}
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
	return c2, l2, nil
}

// queryIndexer asks the remote indexer where the prompt's tokens are
// cached; nil (route without it) when it fails, counted.
func (p *Proxy) queryIndexer(ctx context.Context, req Body, toks []int) map[string]TierBlocks {
	model, _ := req["model"].(string)
	cached, err := p.indexer.query(ctx, model, toks)
	if err != nil {
		p.mIndexer.WithLabelValues("error").Inc()
		p.log.Debug("indexer query failed: routing without it", "err", err)
		return nil
	}
	p.mIndexer.WithLabelValues("ok").Inc()
	return cached
}

// promptTokens is the request's prompt as its engine tokenizes it
// (Config.Tokenizer); nil when that failed (counted).
func (p *Proxy) promptTokens(ctx context.Context, endpoint string, req Body) []int {
	var engineURL string
	for _, in := range p.prefill {
		if h, _, _ := in.snapshot(); h {
			engineURL = in.url
			break
		}
	}
	toks, err := p.tok.tokens(ctx, endpoint, req, engineURL)
	if err != nil {
		p.mTokenize.Inc()
		p.log.Debug("prompt not tokenized: routing without cache information", "err", err)
		return nil
	}
	return toks
}
