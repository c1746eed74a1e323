package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/internal/model"
)

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// blocksFor is the number of blocks needed to hold n tokens.
func (e *Engine) blocksFor(n int) int { return ceilDiv(n, e.cfg.BlockSize) }

// schedule decides this step's work (pure bookkeeping, no model work).
// allocate takes n blocks for r, whose block table so far is table: right
// after its last block when free, else in one run large enough for the
// rest of its prompt when there is one (kvcache.Pool.AllocateFor), so that
// block tables stay runs of consecutive ids and a KV transfer moves each
// run with one request.
func (e *Engine) allocate(r *ReqState, table []int, n int) ([]int, error) {
	after := -1
	if len(table) > 0 {
		after = table[len(table)-1]
	}
	return e.pool.AllocateFor(n, after, max(n, e.blocksFor(len(r.tokens))-len(table)))
}

func (e *Engine) schedule() *SchedulerOutput {
	out := &SchedulerOutput{Step: e.step}
	budget := e.cfg.MaxNumBatchedTokens
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(len(r.tokens)-r.computed, budget)
		need := e.blocksFor(r.computed+n) - len(r.blocks)
		for need > e.pool.NumFree() {
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			out.PreemptedReqIDs = append(out.PreemptedReqIDs, victim.id)
			preempted = true
			if victim == r {
				break
			}
		}
		if r.status != StatusRunning {
			break // r itself was preempted
		}
		newIDs, _ := e.allocate(r, r.blocks, max(need, 0))
		r.blocks = append(r.blocks, newIDs...)
		out.Scheduled = append(out.Scheduled, ScheduledRequest{Req: r, NumComputedTokens: r.computed,
			NumScheduledTokens: n, NewBlockIDs: newIDs, BlockIDs: slices.Clone(r.blocks)})
		budget -= n
	}
	if preempted {
		return out
	}
	for i := 0; i < len(e.waiting) && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs; {
		r := e.waiting[i]
		sched, remote, stop, fail := e.admit(r, budget)
		if fail != nil {
			e.finish(r, FinishError, fail) // removes r from waiting
			continue
		}
		if stop {
			break
		}
		switch {
		case remote != nil:
			e.waiting = slices.Delete(e.waiting, i, i+1)
			e.remote = append(e.remote, r)
			out.NewRemoteLoads = append(out.NewRemoteLoads, *remote)
		case sched != nil:
			e.waiting = slices.Delete(e.waiting, i, i+1)
			e.running = append(e.running, r)
			out.Scheduled = append(out.Scheduled, *sched)
			budget -= sched.NumScheduledTokens
		default:
			i++ // not ready (connector asks to retry)
		}
	}
	e.mu.Lock()
	e.queued = len(e.waiting) + len(e.inbox)
	e.mu.Unlock()
	return out
}

// admit tries to start waiting request r. It returns the scheduled work, or
// a remote-load record, or stop (no blocks: stop admitting this step), or a
// failure; all nil means "ask again next step".
func (e *Engine) admit(r *ReqState, budget int) (sched, remote *ScheduledRequest, stop bool, fail error) {
	if r.admitted && len(r.blocks) > 0 {
		sched, stop = e.resumeLoaded(r, budget)
		return sched, nil, stop, nil
	}
	// Fresh (or preempted) request: local prefix lookup, then the connector.
	hit := e.localPrefix(r)
	numLocal := len(hit) * e.cfg.BlockSize
	n, async, pending, err := e.externalMatch(r, numLocal)
	if err != nil || pending {
		return nil, nil, false, err
	}
	start := numLocal + n
	nNew := 0
	if !async {
		start = min(start, len(r.tokens)-1)
		nNew = min(len(r.tokens)-start, budget)
	}
	newIDs, ok := e.allocateAdmitted(r, hit, max(start+nNew, numLocal+n))
	if !ok {
		return nil, nil, true, nil
	}
	r.numLocal, r.numExternal, r.invalidFrom, r.admitted = numLocal, n, -1, true
	r.computed = numLocal
	if r.numPreemption == 0 {
		e.counters.PrefixQueriedTokens += uint64(len(r.prompt))
		e.counters.PrefixHitTokens += uint64(min(numLocal, len(r.prompt)))
		e.counters.ExternalTokens += uint64(n)
	}
	e.conn.UpdateStateAfterAlloc(r, slices.Clone(r.blocks), n)
	rec := &ScheduledRequest{Req: r, NumComputedTokens: numLocal, NumScheduledTokens: nNew, NewBlockIDs: newIDs, BlockIDs: slices.Clone(r.blocks)}
	if async {
		r.computed = numLocal
		r.status = StatusWaitingForRemoteKVs
		return nil, rec, false, nil
	}
	r.computed = start
	if r.cachedHit == 0 && r.numPreemption == 0 {
		r.cachedHit = start
	}
	rec.NumComputedTokens = start
	r.status = StatusRunning
	return rec, nil, false, nil
}

// resumeLoaded schedules a request back from an async load (its blocks are
// in place, computed is set); stop if the blocks for this step are lacking.
func (e *Engine) resumeLoaded(r *ReqState, budget int) (sched *ScheduledRequest, stop bool) {
	n := min(len(r.tokens)-r.computed, budget)
	need := e.blocksFor(r.computed+n) - len(r.blocks)
	if need > e.pool.NumFree() {
		return nil, true
	}
	newIDs, _ := e.allocate(r, r.blocks, max(need, 0))
	r.blocks = append(r.blocks, newIDs...)
	r.status = StatusRunning
	return &ScheduledRequest{Req: r, NumComputedTokens: r.computed, NumScheduledTokens: n,
		NewBlockIDs: newIDs, BlockIDs: slices.Clone(r.blocks)}, false
}

// localPrefix returns the blocks of r's prompt found in the local prefix
// cache (never the block of the last token).
func (e *Engine) localPrefix(r *ReqState) []int {
	if e.cfg.DisablePrefixCaching {
		return nil
	}
	bs := e.cfg.BlockSize
	r.hashes = kvcache.AppendBlockHashes(r.hashes, r.salt, bs, r.tokens)
	maxBlocks := (len(r.tokens) - 1) / bs
	return e.pool.Lookup(r.hashes[:min(maxBlocks, len(r.hashes))])
}

// externalMatch asks the connector how many tokens beyond numLocal it
// supplies (async: loaded in the background); pending means ask again next
// step.
func (e *Engine) externalMatch(r *ReqState, numLocal int) (n int, async, pending bool, err error) {
	if numLocal < len(r.prompt) {
		// A preempted request may hit beyond its prompt; then there is
		// nothing for the connector to add.
		n, async, err = e.conn.GetNumNewMatchedTokens(r, numLocal)
	}
	if err != nil {
		return 0, false, false, fmt.Errorf("%w: get matched tokens: %w", ErrConnector, err)
	}
	if n == MatchPending {
		return 0, false, true, nil
	}
	if n < 0 || (n > 0 && numLocal+n > len(r.prompt)) {
		return 0, false, false, fmt.Errorf("%w: connector matched %d tokens beyond %d local of a %d-token prompt", ErrConnector, n, numLocal, len(r.prompt))
	}
	return n, async, false, nil
}

// allocateAdmitted gives r the hit blocks plus new ones up to tokens
// positions; false (nothing taken) if the free blocks do not suffice, not
// counting hit blocks that are free (cached) themselves.
func (e *Engine) allocateAdmitted(r *ReqState, hit []int, tokens int) (newIDs []int, ok bool) {
	freeHit := 0
	for _, id := range hit {
		if e.pool.RefCount(id) == 0 {
			freeHit++
		}
	}
	need := e.blocksFor(tokens) - len(hit)
	if need > e.pool.NumFree()-freeHit {
		return nil, false
	}
	e.pool.Touch(hit)
	newIDs, _ = e.allocate(r, hit, need)
	r.blocks = append(slices.Clone(hit), newIDs...)
	r.numHashed = len(hit)
	return newIDs, true
}

// preempt frees r's blocks; it will recompute (its generated tokens are kept).
func (e *Engine) preempt(r *ReqState) {
	e.running = slices.DeleteFunc(e.running, func(x *ReqState) bool { return x == r })
	e.pool.Free(r.blocks)
	r.blocks, r.computed, r.numHashed, r.status = nil, 0, 0, StatusWaiting
	r.admitted = false
	r.numPreemption++
	e.counters.Preemptions++
	e.waiting = append([]*ReqState{r}, e.waiting...)
}

// execute runs the worker side of a step: connector hooks and the forward.
func (e *Engine) execute(ctx context.Context, out *SchedulerOutput, meta any) ([][]float32, error) {
	e.conn.BindConnectorMeta(meta)
	var err error
	if err = e.conn.StartLoadKV(ctx); err != nil {
		err = fmt.Errorf("%w: start load: %w", ErrConnector, err)
	}
	var logits [][]float32
	if err == nil && len(out.Scheduled) > 0 {
		seqs := make([]model.Seq, len(out.Scheduled))
		for i, s := range out.Scheduled {
			r := s.Req
			seqs[i] = model.Seq{Tokens: r.tokens[s.NumComputedTokens : s.NumComputedTokens+s.NumScheduledTokens],
				Start: s.NumComputedTokens, BlockTable: s.BlockIDs, Logits: s.NumComputedTokens+s.NumScheduledTokens == len(r.tokens)}
		}
		logits, err = e.model.ForwardTP(e.cfg.TP, seqs, e.regions, e.cfg.BlockSize, model.Hooks{
			BeforeAttention: func(l int) error {
				if err := e.conn.WaitForLayerLoad(ctx, l); err != nil {
					return fmt.Errorf("%w: wait for layer %d load: %w", ErrConnector, l, err)
				}
				return nil
			},
			KVStored: func(l int) error {
				if err := e.conn.SaveKVLayer(ctx, l); err != nil {
					return fmt.Errorf("%w: save layer %d: %w", ErrConnector, l, err)
				}
				return nil
			},
		})
	}
	if werr := e.conn.WaitForSave(ctx); werr != nil && err == nil {
		err = fmt.Errorf("%w: wait for save: %w", ErrConnector, werr)
	}
	return logits, err
}

// update applies one step's results in five phases: collect the
// connector's output, fail the step's requests on an execution error, mark
// requests with blocks that failed to load, act on finished sends and
// receives, and append the sampled tokens. It reports whether a remote
// request moved to waiting.
func (e *Engine) update(out *SchedulerOutput, logits [][]float32, execErr error) (moved bool) {
	co := e.collectConnectorOutput()
	if execErr != nil {
		e.failScheduled(out, execErr)
	}
	if len(co.InvalidBlockIDs) > 0 {
		e.markLoadErrors(co.InvalidBlockIDs)
	}
	e.freeSent(co.FinishedSending)
	moved = e.admitReceived(co.FinishedRecving)
	e.appendSampled(out, logits)
	return moved
}

// collectConnectorOutput asks the connector which transfers finished and
// which blocks failed to load, and hands it back its output (vLLM's
// update_connector_output).
func (e *Engine) collectConnectorOutput() ConnectorOutput {
	finishedIDs := e.finished
	e.finished = nil
	doneSending, doneRecving := e.conn.GetFinished(finishedIDs)
	invalid := e.conn.GetBlockIDsWithLoadErrors()
	e.conn.ClearConnectorMeta()
	co := ConnectorOutput{FinishedSending: doneSending, FinishedRecving: doneRecving, InvalidBlockIDs: invalid}
	e.conn.UpdateConnectorOutput(co)
	return co
}

// failScheduled ends every request of the step still running with err.
func (e *Engine) failScheduled(out *SchedulerOutput, err error) {
	for _, s := range out.Scheduled {
		if s.Req.status == StatusRunning {
			e.finish(s.Req, FinishError, err)
		}
	}
}

// markLoadErrors finds the owners of blocks that failed to load: under
// PolicyFail they end with ErrKVLoad, otherwise they recompute from the
// first bad block.
func (e *Engine) markLoadErrors(invalid []int) {
	bad := map[int]bool{}
	for _, id := range invalid {
		if id < 0 || id >= e.pool.NumBlocks() {
			continue // not a block of this engine: a connector's bug, refused
		}
		bad[id] = true
		e.pool.DropHash(id)
	}
	for _, list := range [][]*ReqState{slices.Clone(e.running), slices.Clone(e.remote)} {
		for _, r := range list {
			first := -1
			lo := r.numLocal / e.cfg.BlockSize
			hi := min(e.blocksFor(r.numLocal+r.numExternal), len(r.blocks))
			for bi := lo; bi < hi; bi++ {
				if bad[r.blocks[bi]] {
					first = bi
					break
				}
			}
			if first < 0 {
				continue
			}
			if e.cfg.KVLoadFailurePolicy == PolicyFail {
				e.finish(r, FinishError, fmt.Errorf("%w: block %d of request %s", ErrKVLoad, r.blocks[first], r.id))
				continue
			}
			pos := first * e.cfg.BlockSize
			if r.invalidFrom < 0 || pos < r.invalidFrom {
				r.invalidFrom = pos
			}
		}
	}
}

// freeSent frees the delayed blocks of requests whose KV was sent.
func (e *Engine) freeSent(ids []string) {
	for _, id := range ids {
		if blocks, ok := e.delayed[id]; ok {
			e.pool.Free(blocks)
			delete(e.delayed, id)
		}
	}
}

// admitReceived moves requests whose KV arrived from remote to waiting,
// computed up to what was loaded (or the first bad block). It reports
// whether any moved.
func (e *Engine) admitReceived(ids []string) (moved bool) {
	for _, id := range ids {
		i := slices.IndexFunc(e.remote, func(r *ReqState) bool { return r.id == id })
		if i < 0 {
			continue
		}
		r := e.remote[i]
		e.remote = slices.Delete(e.remote, i, i+1)
		c := r.numLocal + r.numExternal
		if r.invalidFrom >= 0 {
			c = min(c, r.invalidFrom)
			r.invalidFrom = -1
		}
		seeded := c == len(r.prompt) && e.seedFirstToken(r)
		c = min(c, len(r.tokens)-1)
		r.computed = c
		r.cachedHit = min(c, len(r.prompt))
		r.status = StatusWaiting
		e.cacheBlocks(r)
		if seeded {
			if reason := e.stopReason(r); reason != "" {
				e.finish(r, reason, nil)
				moved = true
				continue
			}
		}
		// Keep arrival order among waiting requests.
		e.waiting = append(e.waiting, r)
		moved = true
	}
	return moved
}

// seedFirstToken takes r's first output token from the connector when it
// shipped one with the KV of the whole prompt (FirstTokenSource): the token
// is appended and streamed, and the sampling generator advances as if it
// had sampled it, so that the rest of the output equals a colocated run's.
func (e *Engine) seedFirstToken(r *ReqState) bool {
	src, ok := e.conn.(FirstTokenSource)
	if !ok || len(r.tokens) != len(r.prompt) || r.numPreemption > 0 {
		return false
	}
	tok, lp, ok := src.FirstToken(r)
	if !ok || tok < 0 || tok >= e.model.Config.VocabSize {
		return false
	}
	if r.params.Temperature != 0 {
		r.rng.Float64() // sample draws exactly one number per token
	}
	r.tokens = append(r.tokens, tok)
	r.logprobs = append(r.logprobs, lp)
	r.seeded = true
	e.counters.GeneratedTokens++
	e.counters.FirstTokensFromConnector++
	r.stream.push([]int{tok}, nil)
	return true
}

// appendSampled advances the step's running requests: a prefill chunk
// moves computed on; a finished prompt or a decode step samples a token and
// may finish the request. A request with a bad block recomputes instead.
func (e *Engine) appendSampled(out *SchedulerOutput, logits [][]float32) {
	for i, s := range out.Scheduled {
		r := s.Req
		if r.status != StatusRunning {
			continue
		}
		if r.invalidFrom >= 0 {
			// Recompute from the first bad block; drop this step's work.
			r.computed = min(r.computed, r.invalidFrom)
			r.numHashed = min(r.numHashed, r.invalidFrom/e.cfg.BlockSize)
			r.invalidFrom = -1
			continue
		}
		r.computed += s.NumScheduledTokens
		if r.computed <= len(r.prompt) {
			e.counters.PromptTokens += uint64(s.NumScheduledTokens)
		}
		e.cacheBlocks(r)
		if r.computed < len(r.tokens) {
			continue // mid-prefill chunk
		}
		tok := e.sample(r, logits[i])
		r.tokens = append(r.tokens, tok)
		r.logprobs = append(r.logprobs, logprob(logits[i], tok))
		e.counters.GeneratedTokens++
		r.stream.push([]int{tok}, nil)
		if reason := e.stopReason(r); reason != "" {
			e.finish(r, reason, nil)
		}
	}
}

// cacheBlocks registers r's newly full, computed blocks in the prefix cache.
func (e *Engine) cacheBlocks(r *ReqState) {
	if e.cfg.DisablePrefixCaching {
		return
	}
	full := min(r.computed/e.cfg.BlockSize, len(r.blocks))
	if full <= r.numHashed {
		return
	}
	r.hashes = kvcache.AppendBlockHashes(r.hashes, r.salt, e.cfg.BlockSize, r.tokens[:full*e.cfg.BlockSize])
	run := -1 // start of the current run of newly stored blocks (KV events)
	for i := r.numHashed; i < full; i++ {
		stored := false
		if e.cfg.KVEvents != nil {
			_, had := e.pool.Hash(r.blocks[i])
			e.pool.SetHash(r.blocks[i], r.hashes[i])
			h, has := e.pool.Hash(r.blocks[i])
			stored = !had && has && h == r.hashes[i]
		} else {
			e.pool.SetHash(r.blocks[i], r.hashes[i])
		}
		if stored && run < 0 {
			run = i
		}
		if !stored && run >= 0 {
			e.storedEvent(r, run, i)
			run = -1
		}
	}
	if run >= 0 {
		e.storedEvent(r, run, full)
	}
	r.numHashed = full
}

// storedEvent publishes blocks [from, to) of r as one BlockStored event.
func (e *Engine) storedEvent(r *ReqState, from, to int) {
	var parent *kvcache.BlockHash
	if from > 0 {
		p := r.hashes[from-1]
		parent = &p
	}
	bs := e.cfg.BlockSize
	e.cfg.KVEvents.BlockStored(append([]kvcache.BlockHash(nil), r.hashes[from:to]...), parent, append([]int(nil), r.tokens[from*bs:to*bs]...))
}

// logprob is log-softmax(logits)[tok], computed in float64.
func logprob(logits []float32, tok int) float32 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return float32(float64(logits[tok]) - mx - math.Log(sum))
}

func (e *Engine) sample(r *ReqState, logits []float32) int {
	if r.params.Temperature == 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return best
	}
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	probs := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		p := math.Exp((float64(v) - mx) / r.params.Temperature)
		probs[i] = p
		sum += p
	}
	idx := make([]int, len(probs))
	for i := range idx {
		idx[i] = i
	}
	if tp := r.params.TopP; tp > 0 && tp < 1 {
		// Most likely first, lowest id first on ties: a total order.
		slices.SortFunc(idx, func(a, b int) int {
			switch {
			case probs[a] > probs[b]:
				return -1
			case probs[a] < probs[b]:
				return 1
			}
			return a - b
		})
		var acc float64
		for k, i := range idx {
			acc += probs[i]
			if acc >= tp*sum {
				idx = idx[:k+1]
				sum = acc
				break
			}
		}
	}
	x := r.rng.Float64() * sum
	for _, i := range idx {
		x -= probs[i]
		if x < 0 {
			return i
		}
	}
	return idx[len(idx)-1]
}

func (e *Engine) stopReason(r *ReqState) string {
	out := r.tokens[len(r.prompt):]
	last := out[len(out)-1]
	if !r.params.IgnoreEOS && slices.Contains(e.cfg.EOSTokenIDs, last) {
		return FinishStop
	}
	if slices.Contains(r.params.StopTokenIDs, last) {
		return FinishStop
	}
	for _, s := range r.params.StopSequences {
		if len(out) >= len(s) && slices.Equal(out[len(out)-len(s):], s) {
			return FinishStop
		}
	}
	if len(out) >= r.params.MaxTokens || len(r.tokens) >= e.cfg.MaxModelLen {
		return FinishLength
	}
	return ""
}

// finish ends r: connector RequestFinished, blocks freed or delayed, final output.
func (e *Engine) finish(r *ReqState, reason string, err error) {
	if r.status == StatusFinished {
		return
	}
	e.running = slices.DeleteFunc(e.running, func(x *ReqState) bool { return x == r })
	e.waiting = slices.DeleteFunc(e.waiting, func(x *ReqState) bool { return x == r })
	e.remote = slices.DeleteFunc(e.remote, func(x *ReqState) bool { return x == r })
	r.status = StatusFinished
	r.finishReason = reason
	blocks := r.blocks
	delay, params := e.conn.RequestFinished(r, slices.Clone(blocks))
	if len(blocks) > 0 {
		if delay {
			e.delayed[r.id] = blocks
		} else {
			e.pool.Free(blocks)
		}
	}
	r.blocks = nil
	e.finished = append(e.finished, r.id)
	e.mu.Lock()
	delete(e.ids, r.id)
	e.mu.Unlock()
	if err == nil && reason == FinishError {
		err = errors.New("engine: request failed")
	}
	r.stream.push(nil, &Output{RequestID: r.id, Finished: true, FinishReason: reason, Err: err,
		KVTransferParams: params, NumPromptTokens: len(r.prompt), NumOutputTokens: len(r.tokens) - len(r.prompt),
		NumCachedTokens: r.cachedHit})
}

func (e *Engine) publishStats() {
	s := e.counters
	s.Running, s.Waiting, s.WaitingForRemote, s.DelayedFree = len(e.running), len(e.waiting), len(e.remote), len(e.delayed)
	s.BlocksTotal, s.BlocksUsed, s.BlocksFree, s.BlocksCached = e.pool.NumBlocks(), e.pool.NumUsed(), e.pool.NumFree(), e.pool.NumCached()
	s.Steps = e.step
	e.statsMu.Lock()
	e.stats = s
	e.statsMu.Unlock()
}
