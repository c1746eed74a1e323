package proxy

import (
	"math"
	"sync"
)

// CostModel predicts the prefill seconds of one request on an instance that
// already holds the first p tokens of its prompt and must compute n more:
//
//	T_prefill = Fixed + PerToken*n + PerTokenPair*(n*p + n*n/2)
//
// the same shape as internal/tracesim (a fixed launch cost, a linear MLP
// term and the attention term: every new token attends to the cached
// prefix and to the new tokens before it). The coefficients are assumptions,
// not measurements; calibrate them per deployment with the
// --cost-* flags of `mooncake proxy`.
//
// A prefix cached below the device must be loaded first: HostPerToken and
// DiskPerToken are the seconds to bring one cached token's KV up from host
// memory and from disk (Load).
type CostModel struct {
	Fixed        float64 // seconds per request
	PerToken     float64 // seconds per uncached token
	PerTokenPair float64 // seconds per (new token, attended position) pair
	HostPerToken float64 // seconds per cached token loaded from host memory
	DiskPerToken float64 // seconds per cached token loaded from disk
}

// DefaultCostModel is the assumed model when none is given: 10 ms per
// request, 60 us per token, 0.5 ns per token pair (a mid-size model on one
// accelerator; the tracesim defaults); loading a cached token's KV (about
// 0.5 MB for a 7B model) 15 us from host memory (~30 GB/s) and 40 us from
// disk (~12 GB/s of NVMe).
func DefaultCostModel() CostModel {
	return CostModel{Fixed: 0.010, PerToken: 60e-6, PerTokenPair: 0.5e-9, HostPerToken: 15e-6, DiskPerToken: 40e-6}
}

// Load returns the predicted seconds to bring host tokens up from host
// memory and disk tokens from disk.
func (m CostModel) Load(host, disk int) float64 {
	return m.HostPerToken*float64(host) + m.DiskPerToken*float64(disk)
}

// Prefill returns the predicted seconds to compute n new tokens after a
// cached prefix of p tokens.
func (m CostModel) Prefill(n, p int) float64 {
	fn, fp := float64(n), float64(p)
	return m.Fixed + m.PerToken*fn + m.PerTokenPair*(fn*fp+fn*fn/2)
}

func (m CostModel) valid() bool {
	for _, v := range []float64{m.Fixed, m.PerToken, m.PerTokenPair, m.HostPerToken, m.DiskPerToken} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// ConductorConfig tunes Conductor. Zero fields take defaults.
type ConductorConfig struct {
	// Cost is the prefill cost model (zero value: DefaultCostModel).
	Cost CostModel
	// Matched, if set, feeds the prefix index from the instances' KV events
	// (see KVAwareConfig.Matched).
	Matched MatchFunc
	// BlockBytes is the text block size of the prefix hashes (default 64);
	// with a byte-level tokenizer a byte is a token, so a matched block is
	// BlockBytes cached tokens.
	BlockBytes int
	// MaxBlocksPerInstance bounds the remembered block hashes per instance
	// (LRU; default 65536).
	MaxBlocksPerInstance int
}

// Plan is the conductor's decision for one request.
type Plan struct {
	Index        int     // into the candidates
	TTFT         float64 // predicted seconds to first token on that candidate
	Queue        float64 // predicted prefill seconds already queued there
	Prefill      float64 // predicted prefill seconds of this request there
	PrefixTokens int     // tokens of the prompt believed cached there
}

// Conductor is Mooncake's conductor rule reduced to what a proxy knows. For
// each candidate it predicts
//
//	TTFT_est = T_queue + T_prefill(input_len, prefix_len)
//
// where T_queue is the sum of the predicted prefill seconds of the requests
// dispatched to the instance and not yet answered, prefix_len comes from the
// same prefix-block index as KVAware (or a remote indexer's tiered answer:
// then T_prefill includes loading the host and disk parts of the prefix,
// CostModel.Load, each taken only where loading beats recomputing), and input_len is the prompt length in
// tokens (bytes: our tokenizer is byte-level, so a byte is a token; for a
// subword tokenizer this over-counts by ~4x, which a smaller PerToken
// absorbs). T_transfer is 0: the proxy never moves a cache between prefill
// instances, a prefix either hits where it is or is recomputed. It picks the
// lowest TTFT_est (ties rotate round-robin).
//
// It is pure and deterministic: no clock, no I/O. The caller reports the
// dispatch with Enqueue and calls the returned done func when the prefill
// half ends, however it ends.
type Conductor struct {
	cfg ConductorConfig
	kv  *KVAware

	rr    RoundRobin // where the search starts
	mu    sync.Mutex
	queue map[string]*queued
}

type queued struct {
	seconds float64
	n       int
}

// NewConductor returns a Conductor.
func NewConductor(cfg ConductorConfig) *Conductor {
	if cfg.Cost == (CostModel{}) || !cfg.Cost.valid() {
		cfg.Cost = DefaultCostModel()
	}
	if cfg.BlockBytes <= 0 {
		cfg.BlockBytes = 64
	}
	return &Conductor{
		cfg:   cfg,
		kv:    NewKVAware(KVAwareConfig{MaxBlocksPerInstance: cfg.MaxBlocksPerInstance, Matched: cfg.Matched}),
		queue: make(map[string]*queued),
	}
}

// Plan predicts TTFT on every candidate for a prompt of promptTokens tokens
// whose prefix hashes are blocks, and returns the best. cands is never
// empty. It implements Policy with Dispatch.
func (c *Conductor) Plan(blocks []uint64, promptTokens int, cands []Load) Plan {
	c.mu.Lock()
	defer c.mu.Unlock()
	if min := len(blocks) * c.cfg.BlockBytes; promptTokens < min {
		promptTokens = min
	}
	start := c.rr.Pick(blocks, cands)
	best := Plan{Index: -1}
	for k := 0; k < len(cands); k++ {
		i := (start + k) % len(cands)
		var prefix int
		var load float64
		if cached := cands[i].Cached; cached != nil {
			// A tiered prefix: use the part worth loading. Each lower-tier
			// run is taken only when loading it beats computing it.
			prefix = cached.Device * c.cfg.BlockBytes
			if h := (cached.Host - cached.Device) * c.cfg.BlockBytes; h > 0 && c.cfg.Cost.HostPerToken < c.cfg.Cost.PerToken {
				prefix += h
				load += c.cfg.Cost.Load(h, 0)
				if d := (cached.Disk - cached.Host) * c.cfg.BlockBytes; d > 0 && c.cfg.Cost.DiskPerToken < c.cfg.Cost.PerToken {
					prefix += d
					load += c.cfg.Cost.Load(0, d)
				}
			} else if d := (cached.Disk - cached.Host) * c.cfg.BlockBytes; h == 0 && d > 0 && c.cfg.Cost.DiskPerToken < c.cfg.Cost.PerToken {
				prefix += d
				load += c.cfg.Cost.Load(0, d)
			}
			prefix = min(prefix, promptTokens)
		} else {
			prefix = c.kv.Matched(cands[i].ID, blocks) * c.cfg.BlockBytes
		}
		var q float64
		if e := c.queue[cands[i].ID]; e != nil {
			q = e.seconds
		}
		pre := c.cfg.Cost.Prefill(promptTokens-prefix, prefix) + load
		if best.Index < 0 || q+pre < best.TTFT {
			best = Plan{Index: i, TTFT: q + pre, Queue: q, Prefill: pre, PrefixTokens: prefix}
		}
	}
	return best
}

// Pick returns the index of the candidate Plan chooses, taking the prompt
// length from its whole blocks.
func (c *Conductor) Pick(blocks []uint64, cands []Load) int {
	return c.Plan(blocks, len(blocks)*c.cfg.BlockBytes, cands).Index
}

// Routed records that instance id now holds blocks.
func (c *Conductor) Routed(id string, blocks []uint64) { c.kv.Routed(id, blocks) }

// Dispatch implements Policy: instance id now holds blocks and has plan's
// prefill seconds queued until done is called.
func (c *Conductor) Dispatch(id string, blocks []uint64, plan Plan) (done func()) {
	c.Routed(id, blocks)
	return c.Enqueue(id, plan.Prefill)
}

// Enqueue adds seconds of predicted prefill work to instance id's queue and
// returns the func that removes it; calling that func more than once is
// harmless. When an instance's last request is done its queue is exactly 0.
func (c *Conductor) Enqueue(id string, seconds float64) (done func()) {
	c.mu.Lock()
	e := c.queue[id]
	if e == nil {
		e = &queued{}
		c.queue[id] = e
	}
	e.seconds += seconds
	e.n++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			e.n--
			e.seconds -= seconds
			if e.n <= 0 || e.seconds < 0 {
				e.seconds = 0 // no float residue once the queue is empty
			}
		})
	}
}

// Queue returns the predicted prefill seconds queued on instance id and the
// number of requests they belong to.
func (c *Conductor) Queue(id string) (seconds float64, requests int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.queue[id]; e != nil {
		return e.seconds, e.n
	}
	return 0, 0
}
