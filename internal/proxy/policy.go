package proxy

import (
	"container/list"
	"fmt"
	"hash/fnv"
	"sync"
)

// Load is what a Policy sees of one candidate instance: its stable ID (the
// instance URL), the number of requests the proxy has in flight on it and,
// when an indexer answered for this request, the prompt's leading blocks
// cached there per tier (nil: the policy uses its own prefix index).
type Load struct {
	ID       string
	InFlight int
	Cached   *TierBlocks
}

// TierBlocks is a prompt's cached prefix on one instance, in blocks,
// cumulative over tiers as the indexer reports them: Device blocks on its
// accelerator, Host the prefix extended with host-memory blocks (its own
// or a shared pool's) from the first device miss, Disk extended again with
// disk blocks. Device <= Host <= Disk.
type TierBlocks struct {
	Device, Host, Disk int
}

// TierWeights are what a block is worth to the kvcache-aware score by
// where it is cached: a device block 1 (nothing to do), a host block less
// (it must be copied up first), a disk block less again.
type TierWeights struct {
	Host, Disk float64
}

// DefaultTierWeights: a host block is worth 0.75 of a device block, a disk
// block 0.5 (assumptions: calibrate per deployment).
func DefaultTierWeights() TierWeights { return TierWeights{Host: 0.75, Disk: 0.5} }

// weighted is the prefix's worth in device blocks.
func (w TierWeights) weighted(c TierBlocks) float64 {
	return float64(c.Device) + w.Host*float64(c.Host-c.Device) + w.Disk*float64(c.Disk-c.Host)
}

// Policy chooses one instance among healthy candidates for a request. It
// is pure (no I/O, no clock). Plan sees the prompt's prefix-block hashes,
// its length in tokens and the candidates' loads (cands is never empty) and
// returns its choice, cands[Plan.Index], with what it predicts there (zero
// where it predicts nothing: a zero TTFT is never over an SLO). Dispatch
// tells it the request went to instance id as planned, so that cache-aware
// policies learn and queue-aware ones count it; done is called once that
// request ended, however it ended.
type Policy interface {
	Plan(blocks []uint64, promptTokens int, cands []Load) Plan
	Dispatch(id string, blocks []uint64, plan Plan) (done func())
}

// picker is a policy that predicts nothing: RoundRobin, LeastLoaded and
// KVAware pick an index and learn where requests went.
type picker interface {
	Pick(blocks []uint64, cands []Load) int
	Routed(id string, blocks []uint64)
}

// picked fits a picker to Policy: a Plan with only an Index, nothing
// queued.
type picked struct{ picker }

func (p picked) Plan(blocks []uint64, _ int, cands []Load) Plan {
	return Plan{Index: p.Pick(blocks, cands)}
}

func (p picked) Dispatch(id string, blocks []uint64, _ Plan) func() {
	p.Routed(id, blocks)
	return func() {}
}

var (
	_ Policy = picked{}
	_ Policy = (*Conductor)(nil)
)

// Policy names accepted by Config.PrefillPolicy / Config.DecodePolicy.
const (
	PolicyRoundRobin  = "round-robin"
	PolicyLeastLoaded = "least-loaded"
	PolicyKVAware     = "kvcache-aware"
	PolicyConductor   = "conductor"
)

// NewPolicy returns the policy called name.
func NewPolicy(name string) (Policy, error) {
	switch name {
	case PolicyRoundRobin, "":
		return picked{&RoundRobin{}}, nil
	case PolicyLeastLoaded:
		return picked{&LeastLoaded{}}, nil
	case PolicyKVAware:
		return picked{NewKVAware(KVAwareConfig{})}, nil
	case PolicyConductor:
		return NewConductor(ConductorConfig{}), nil
	}
	return nil, fmt.Errorf("proxy: unknown policy %q (want %s, %s, %s or %s)", name,
		PolicyRoundRobin, PolicyLeastLoaded, PolicyKVAware, PolicyConductor)
}

// RoundRobin cycles through the candidates in order.
type RoundRobin struct {
	mu   sync.Mutex
	next uint64
}

// Pick returns the index of the chosen candidate.
func (p *RoundRobin) Pick(_ []uint64, cands []Load) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := int(p.next % uint64(len(cands)))
	p.next++
	return i
}

// Routed does nothing: the policy does not learn.
func (p *RoundRobin) Routed(string, []uint64) {}

// LeastLoaded picks the candidate with the fewest requests in flight; ties
// are broken round-robin so equal instances share the work.
type LeastLoaded struct {
	rr RoundRobin // where the search starts
}

// Pick returns the index of the chosen candidate.
func (p *LeastLoaded) Pick(hashes []uint64, cands []Load) int {
	start := p.rr.Pick(hashes, cands)
	best := start
	for k := 1; k < len(cands); k++ {
		i := (start + k) % len(cands)
		if cands[i].InFlight < cands[best].InFlight {
			best = i
		}
	}
	return best
}

// Routed does nothing: the policy does not learn.
func (p *LeastLoaded) Routed(string, []uint64) {}

// MatchFunc reports how many leading blocks an instance holds, from a
// source other than the policy's own bookkeeping (kvevents.Index.Matched).
type MatchFunc func(id string, blocks []uint64) int

// KVAwareConfig tunes KVAware. Zero fields take defaults.
type KVAwareConfig struct {
	// QueueCostBlocks is the estimated prefill cost of one request already in
	// flight on an instance, in blocks (default 16).
	QueueCostBlocks int
	// MaxBlocksPerInstance bounds the remembered block hashes per instance
	// (LRU; default 65536).
	MaxBlocksPerInstance int
	// Matched, if set, says which blocks an instance holds (the instances'
	// KV events, kvevents.Index.Matched) instead of the policy's own
	// bookkeeping; Routed then records nothing.
	Matched MatchFunc
	// Tiers weighs blocks a remote indexer reports cached on host or disk
	// (Load.Cached); zero: DefaultTierWeights.
	Tiers TierWeights
}

// KVAware is the conductor-style cache-aware policy: it remembers which
// prefix blocks it sent to each instance and picks the instance with the
// lowest estimated time to first token, in block units:
//
//	score = InFlight*QueueCostBlocks + (len(blocks) - matchedPrefix)
//
// where matchedPrefix is the longest run of leading blocks the instance has
// seen, or, when a remote indexer answered (Load.Cached), the tiered prefix
// weighed by Tiers (device 1, host 0.75, disk 0.5 by default). Ties go to
// the lowest index after a round-robin rotation.
type KVAware struct {
	cfg  KVAwareConfig
	rr   RoundRobin // where the search starts
	mu   sync.Mutex
	inst map[string]*blockLRU
}

// NewKVAware returns a KVAware policy.
func NewKVAware(cfg KVAwareConfig) *KVAware {
	if cfg.QueueCostBlocks <= 0 {
		cfg.QueueCostBlocks = 16
	}
	if cfg.MaxBlocksPerInstance <= 0 {
		cfg.MaxBlocksPerInstance = 65536
	}
	if cfg.Tiers == (TierWeights{}) {
		cfg.Tiers = DefaultTierWeights()
	}
	return &KVAware{cfg: cfg, inst: make(map[string]*blockLRU)}
}

// Matched returns how many leading blocks instance id is believed to hold.
func (p *KVAware) Matched(id string, blocks []uint64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.matchedLocked(id, blocks)
}

func (p *KVAware) matchedLocked(id string, blocks []uint64) int {
	if p.cfg.Matched != nil {
		return p.cfg.Matched(id, blocks)
	}
	c := p.inst[id]
	if c == nil {
		return 0
	}
	n := 0
	for _, h := range blocks {
		if !c.has(h) {
			break
		}
		n++
	}
	return n
}

// Pick returns the index of the chosen candidate.
func (p *KVAware) Pick(blocks []uint64, cands []Load) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := p.rr.Pick(blocks, cands)
	best, bestScore := -1, 0.0
	for k := 0; k < len(cands); k++ {
		i := (start + k) % len(cands)
		var matched float64
		if c := cands[i].Cached; c != nil {
			matched = p.cfg.Tiers.weighted(*c)
		} else {
			matched = float64(p.matchedLocked(cands[i].ID, blocks))
		}
		score := float64(cands[i].InFlight*p.cfg.QueueCostBlocks+len(blocks)) - matched
		if best < 0 || score < bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// Routed records that instance id now holds blocks.
func (p *KVAware) Routed(id string, blocks []uint64) {
	if p.cfg.Matched != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.inst[id]
	if c == nil {
		c = newBlockLRU(p.cfg.MaxBlocksPerInstance)
		p.inst[id] = c
	}
	for _, h := range blocks {
		c.touch(h)
	}
}

// blockLRU is a bounded set of block hashes with least-recently-used eviction.
type blockLRU struct {
	max   int
	order *list.List
	items map[uint64]*list.Element
}

func newBlockLRU(max int) *blockLRU {
	return &blockLRU{max: max, order: list.New(), items: make(map[uint64]*list.Element)}
}

func (c *blockLRU) has(h uint64) bool { _, ok := c.items[h]; return ok }

func (c *blockLRU) touch(h uint64) {
	if e, ok := c.items[h]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.items[h] = c.order.PushFront(h)
	for c.order.Len() > c.max {
		e := c.order.Back()
		c.order.Remove(e)
		delete(c.items, e.Value.(uint64))
	}
}

// PromptBlocks cuts text into blockBytes-sized blocks and returns their
// chained hashes (each hash covers its block and every block before it), so
// equal hashes mean equal prefixes. The proxy works on text, not tokens: a
// block of 64 bytes is roughly 16 tokens. A trailing partial block is not
// hashed (as an engine does not cache partial blocks).
func PromptBlocks(text string, blockBytes int) []uint64 {
	if blockBytes <= 0 {
		blockBytes = 64
	}
	n := len(text) / blockBytes
	out := make([]uint64, 0, n)
	var prev [8]byte
	for i := 0; i < n; i++ {
		h := fnv.New64a()
		h.Write(prev[:])
		h.Write([]byte(text[i*blockBytes : (i+1)*blockBytes]))
		v := h.Sum64()
		for k := 0; k < 8; k++ {
			prev[k] = byte(v >> (8 * k))
		}
		out = append(out, v)
	}
	return out
}
