package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/internal/model"
)

// Stats is a snapshot of the engine's state, for metrics and leak checks.
type Stats struct {
	Running          int
	Waiting          int
	WaitingForRemote int
	DelayedFree      int // finished requests whose blocks wait for the connector
	BlocksTotal      int
	BlocksUsed       int
	BlocksFree       int
	BlocksCached     int
	// PrefixQueriedTokens and PrefixHitTokens count prompt tokens looked
	// up in the local prefix cache and found there.
	PrefixQueriedTokens uint64
	PrefixHitTokens     uint64
	ExternalTokens      uint64 // prompt tokens supplied by the connector
	PromptTokens        uint64 // prompt tokens computed
	GeneratedTokens     uint64
	// FirstTokensFromConnector counts first output tokens taken from the
	// connector (FirstTokenSource) with the KV instead of computed; they
	// are included in GeneratedTokens.
	FirstTokensFromConnector uint64
	Preemptions              uint64
	Steps                    uint64
}

// Engine runs requests through the model. See the package doc.
type Engine struct {
	cfg     Config
	model   *model.Model
	regions *kvcache.Regions
	pool    *kvcache.Pool
	conn    Connector
	compat  kvcache.Compat
	removed []kvcache.BlockHash // evicted this step, for KVEvents

	mu       sync.Mutex // guards inbox, aborts, closed, queued, ids
	inbox    []*ReqState
	aborts   []string
	closed   bool
	queued   int // requests submitted and not yet running (inbox + waiting)
	ids      map[string]bool
	wake     chan struct{}
	statsMu  sync.Mutex
	stats    Stats
	runCount int

	// Owned by the step goroutine.
	waiting  []*ReqState
	remote   []*ReqState
	running  []*ReqState
	delayed  map[string][]int
	finished []string // finished since the last GetFinished
	counters Stats
	step     uint64
}

// New builds an engine: allocates the KV regions and registers them with
// the connector.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	mc := cfg.Model.Config
	layout := kvcache.Layout{NumLayers: mc.NumHiddenLayers, NumBlocks: cfg.NumBlocks, BlockSize: cfg.BlockSize,
		NumKVHeads: mc.NumKeyValueHeads, HeadDim: mc.Dim(), TP: cfg.TP}
	regions, err := kvcache.NewRegions(layout, cfg.Allocator)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	pool, err := kvcache.NewPoolWith(cfg.NumBlocks, cfg.Eviction)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{
		cfg: cfg, model: cfg.Model, regions: regions, pool: pool, conn: cfg.Connector,
		compat: kvcache.Compat{Model: cfg.ModelName, DType: "float32", NumLayers: layout.NumLayers,
			NumKVHeads: layout.NumKVHeads, HeadDim: layout.HeadDim, BlockSize: layout.BlockSize,
			Weights: cfg.Model.Fingerprint()},
		ids: map[string]bool{}, wake: make(chan struct{}, 1), delayed: map[string][]int{},
	}
	if ev := cfg.KVEvents; ev != nil {
		e.pool.SetRemovedHook(func(h kvcache.BlockHash) { e.removed = append(e.removed, h) })
		ev.AllBlocksCleared()
	}
	if err := e.conn.RegisterKVCaches(e.KVCaches()); err != nil {
		return nil, fmt.Errorf("%w: register kv caches: %w", ErrConnector, err)
	}
	e.publishStats()
	return e, nil
}

// KVCaches describes the KV memory (regions, layout, compatibility).
func (e *Engine) KVCaches() KVCaches {
	return KVCaches{Layout: e.regions.Layout, Compat: e.compat, Ranks: e.regions.Ranks}
}

// Compat is the KV compatibility descriptor.
func (e *Engine) Compat() kvcache.Compat { return e.compat }

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Stats returns a snapshot taken at the end of the last step.
func (e *Engine) Stats() Stats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.stats
}

// Submit admits a request. It fails with ErrInvalidRequest for a request
// that can never run, ErrQueueFull when MaxWaiting requests already wait,
// and ErrClosed after Run returned.
func (e *Engine) Submit(req Request) (*Stream, error) {
	if err := e.check(req); err != nil {
		return nil, err
	}
	r := &ReqState{
		id: req.ID, params: req.Params, kvParams: req.KVTransferParams, salt: req.CacheSalt,
		prompt: slices.Clone(req.Prompt), status: StatusWaiting, blockSize: e.cfg.BlockSize,
	}
	r.tokens = slices.Clip(slices.Clone(r.prompt))
	seed := uint64(0)
	if req.Params.Seed != nil {
		seed = *req.Params.Seed
	} else {
		h := fnv.New64a()
		h.Write([]byte(req.ID))
		seed = h.Sum64()
	}
	r.rng = rand.New(rand.NewPCG(seed, seed^0x6d6f6f6e63616b65))
	r.stream = newStream(req.ID, e.Abort)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return nil, ErrClosed
	case e.ids[req.ID]:
		return nil, fmt.Errorf("%w: duplicate request id %q", ErrInvalidRequest, req.ID)
	case e.queued >= e.cfg.MaxWaiting:
		return nil, fmt.Errorf("%w: %d requests waiting", ErrQueueFull, e.queued)
	}
	e.ids[req.ID] = true
	e.queued++
	e.inbox = append(e.inbox, r)
	e.signal()
	return r.stream, nil
}

func (e *Engine) check(req Request) error {
	p := req.Params
	switch {
	case req.ID == "":
		return fmt.Errorf("%w: empty request id", ErrInvalidRequest)
	case len(req.Prompt) == 0:
		return fmt.Errorf("%w: empty prompt", ErrInvalidRequest)
	case p.MaxTokens <= 0:
		return fmt.Errorf("%w: max_tokens must be at least 1, got %d", ErrInvalidRequest, p.MaxTokens)
	case len(req.Prompt) >= e.cfg.MaxModelLen:
		return fmt.Errorf("%w: prompt of %d tokens does not fit the context of %d tokens", ErrInvalidRequest, len(req.Prompt), e.cfg.MaxModelLen)
	case len(req.Prompt)+p.MaxTokens > e.cfg.MaxModelLen:
		return fmt.Errorf("%w: prompt (%d tokens) + max_tokens (%d) exceeds the context of %d tokens", ErrInvalidRequest, len(req.Prompt), p.MaxTokens, e.cfg.MaxModelLen)
	case p.Temperature < 0 || math.IsNaN(p.Temperature) || p.Temperature > 100:
		return fmt.Errorf("%w: temperature %v must be in [0, 100]", ErrInvalidRequest, p.Temperature)
	case p.TopP < 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return fmt.Errorf("%w: top_p %v must be in (0, 1]", ErrInvalidRequest, p.TopP)
	}
	if need := (len(req.Prompt) + p.MaxTokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize; need > e.cfg.NumBlocks {
		return fmt.Errorf("%w: needs %d KV blocks, the cache has %d", ErrInvalidRequest, need, e.cfg.NumBlocks)
	}
	for _, t := range req.Prompt {
		if t < 0 || t >= e.model.Config.VocabSize {
			return fmt.Errorf("%w: token id %d outside the vocabulary of %d", ErrInvalidRequest, t, e.model.Config.VocabSize)
		}
	}
	for _, s := range p.StopSequences {
		if len(s) == 0 {
			return fmt.Errorf("%w: empty stop sequence", ErrInvalidRequest)
		}
	}
	return nil
}

// Abort ends request id (finish reason "abort") at the next step and frees
// its blocks. Unknown or finished ids are ignored.
func (e *Engine) Abort(id string) {
	e.mu.Lock()
	e.aborts = append(e.aborts, id)
	e.signal()
	e.mu.Unlock()
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run steps the engine until ctx ends, then aborts every request and
// returns nil. It must be called at most once and never concurrently with Step.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.runCount > 0 {
		e.mu.Unlock()
		return errors.New("engine: Run called twice")
	}
	e.runCount++
	e.mu.Unlock()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if ctx.Err() != nil {
			e.shutdown()
			return nil
		}
		busy, poll := e.Step(ctx)
		if busy {
			continue
		}
		var tc <-chan time.Time
		if poll {
			timer.Reset(e.cfg.PollInterval)
			tc = timer.C
		}
		select {
		case <-ctx.Done():
		case <-e.wake:
		case <-tc:
		}
	}
}

func (e *Engine) shutdown() {
	e.mu.Lock()
	e.closed = true
	inbox := e.inbox
	e.inbox = nil
	e.mu.Unlock()
	for _, r := range inbox {
		e.waiting = append(e.waiting, r)
	}
	for _, list := range [][]*ReqState{slices.Clone(e.running), slices.Clone(e.waiting), slices.Clone(e.remote)} {
		for _, r := range list {
			e.finish(r, FinishAbort, nil)
		}
	}
	// Delay-freed blocks belong to transfers that will never be reported now.
	for id, blocks := range e.delayed {
		e.pool.Free(blocks)
		delete(e.delayed, id)
	}
	e.publishStats()
}

// Step runs one engine step: admit and abort, schedule, run the model and
// the connector hooks, sample, finish. busy reports that another step can
// make progress right away; poll that the engine waits only for the
// connector (or for blocks held by it) and should step again soon.
func (e *Engine) Step(ctx context.Context) (busy, poll bool) {
	e.drain()
	e.step++
	out := e.schedule()
	meta := e.conn.BuildConnectorMeta(out)
	logits, execErr := e.execute(ctx, out, meta)
	moved := e.update(out, logits, execErr)
	e.flushRemoved()
	e.publishStats()
	progress := len(out.Scheduled) > 0 || len(out.NewRemoteLoads) > 0 || moved
	busy = len(e.running) > 0 || (len(e.waiting) > 0 && progress)
	poll = len(e.remote) > 0 || len(e.delayed) > 0 || len(e.waiting) > 0
	return busy, poll
}

// flushRemoved publishes the step's evictions as one BlockRemoved event.
func (e *Engine) flushRemoved() {
	if len(e.removed) > 0 && e.cfg.KVEvents != nil {
		e.cfg.KVEvents.BlockRemoved(e.removed)
		e.removed = nil
	}
}

func (e *Engine) drain() {
	e.mu.Lock()
	inbox, aborts := e.inbox, e.aborts
	e.inbox, e.aborts = nil, nil
	e.mu.Unlock()
	e.waiting = append(e.waiting, inbox...)
	for _, id := range aborts {
		if r := e.find(id); r != nil {
			e.finish(r, FinishAbort, nil)
		}
	}
}

func (e *Engine) find(id string) *ReqState {
	for _, list := range [][]*ReqState{e.running, e.waiting, e.remote} {
		for _, r := range list {
			if r.id == id {
				return r
			}
		}
	}
	return nil
}
