package tracesim

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Router is a prefill instance selection policy.
type Router int

const (
	// RoundRobin sends request k to instance k mod N.
	RoundRobin Router = iota
	// LeastLoaded picks the instance with the least queued prefill work.
	LeastLoaded
	// CacheAware picks the longest cached prefix; ties go to the least
	// queued instance.
	CacheAware
	// Conductor is Mooncake's rule: the lowest
	// TTFT_est = T_transfer + T_queue + T_prefill, pulling the best prefix
	// from its holder when the local prefix is shorter by more than the
	// balancing threshold.
	Conductor
)

// Routers lists every router in report order.
var Routers = []Router{RoundRobin, LeastLoaded, CacheAware, Conductor}

func (r Router) String() string {
	switch r {
	case RoundRobin:
		return "round-robin"
	case LeastLoaded:
		return "least-loaded"
	case CacheAware:
		return "cache-aware"
	case Conductor:
		return "conductor"
	}
	return fmt.Sprintf("Router(%d)", int(r))
}

// ErrConfig is wrapped by every RouteConfig validation error.
var ErrConfig = errors.New("tracesim: bad config")

// CostModel predicts prefill time in seconds from the number of uncached
// tokens n and cached prefix tokens p:
//
//	T_prefill = Fixed + PerToken*n + PerTokenPair*(n*p + n*n/2)
//
// The linear term stands for the weights (MLP, projections), the quadratic
// one for causal attention of the n new tokens over p+n positions.
type CostModel struct {
	Fixed        float64 // seconds per request
	PerToken     float64 // seconds per uncached token
	PerTokenPair float64 // seconds per (new token, attended position) pair
}

// Prefill returns T_prefill for a prompt of inputLen tokens whose first
// prefixTokens tokens are cached (clamped to [0, inputLen]).
func (m CostModel) Prefill(inputLen, prefixTokens int64) float64 {
	p := min(max(prefixTokens, 0), max(inputLen, 0))
	n := float64(max(inputLen, 0) - p)
	return m.Fixed + m.PerToken*n + m.PerTokenPair*(n*float64(p)+n*n/2)
}

// RouteConfig configures SimulateRouting.
type RouteConfig struct {
	Instances      int // prefill instances
	CapacityBlocks int // cache per instance in blocks; Unlimited (0) for no limit
	// InstancePolicy is each instance's eviction policy (the zero value is
	// LRU; Belady and ClassCeiling are refused: an instance cannot see the
	// future).
	InstancePolicy Policy
	Cost           CostModel
	// KVBytesPerToken and BandwidthBytesPerSec give
	// T_transfer = blocks*BlockTokens*KVBytesPerToken/BandwidthBytesPerSec.
	KVBytesPerToken      float64
	BandwidthBytesPerSec float64
	// BalanceThresholdBlocks: the conductor pulls the best prefix to an
	// instance only when it is longer than the local one by more than this.
	BalanceThresholdBlocks int
	SLOSeconds             float64 // TTFT SLO
	// Reject turns on early rejection: a request whose chosen instance's
	// TTFT_est exceeds SLOSeconds is refused and changes no state.
	Reject bool
	// EventsFed: the router learns each instance's cached prefix from the
	// instances' KV events (vLLM's format: BlockStored / BlockRemoved,
	// msgpack-encoded and decoded, into a kvevents.Index) instead of
	// reading the caches (its own bookkeeping).
	EventsFed bool
	// Feed, if set, is where the router learns the prefixes instead (a
	// remote indexer fed over the network, internal/bench/conductortrace);
	// it overrides EventsFed. A feed serves one run.
	Feed PrefixFeed
}

// PrefixFeed is a router's view of the instances' caches built from their
// cache events.
type PrefixFeed interface {
	// Events is what instance i's cache announces its changes to.
	Events(instance int) CacheEvents
	// Prefixes sets into[i] to the leading blocks of ids instance i holds,
	// once everything announced so far is applied.
	Prefixes(ids []int64, into []int) error
}

// DefaultRouteConfig returns the defaults: 4 instances of 10000 blocks; a
// cost model of 10 ms + 60 us/token + 0.5 ns/token pair (about 8 s for an
// uncached 85k-token prompt, 0.5 s for 8k); a LLaMA-70B-sized KV
// (80 layers x 8 KV heads x 128 dims x K,V x 2 bytes = 320 KiB per token)
// over 20 GB/s, which puts the reuse-beats-recompute point for an 8k prefix
// near the paper's 6 GB/s; threshold 4 blocks; SLO 30 s; no rejection.
func DefaultRouteConfig() RouteConfig {
	return RouteConfig{
		Instances:              4,
		CapacityBlocks:         10000,
		Cost:                   CostModel{Fixed: 0.010, PerToken: 60e-6, PerTokenPair: 0.5e-9},
		KVBytesPerToken:        80 * 8 * 128 * 2 * 2,
		BandwidthBytesPerSec:   20e9,
		BalanceThresholdBlocks: 4,
		SLOSeconds:             30,
	}
}

// Validate reports the first bad field.
func (c RouteConfig) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	switch {
	case c.Instances < 1:
		return bad("instances %d < 1", c.Instances)
	case c.CapacityBlocks < 0:
		return bad("capacity %d < 0", c.CapacityBlocks)
	case !slices.Contains(Policies, c.InstancePolicy):
		return bad("instance policy %v is not an online policy", c.InstancePolicy)
	case c.Cost.Fixed < 0 || c.Cost.PerToken < 0 || c.Cost.PerTokenPair < 0 ||
		!finite(c.Cost.Fixed) || !finite(c.Cost.PerToken) || !finite(c.Cost.PerTokenPair):
		return bad("prefill cost coefficients must be finite and >= 0")
	case c.KVBytesPerToken <= 0 || !finite(c.KVBytesPerToken):
		return bad("kv bytes per token must be > 0")
	case c.BandwidthBytesPerSec <= 0 || !finite(c.BandwidthBytesPerSec):
		return bad("bandwidth must be > 0")
	case c.BalanceThresholdBlocks < 0:
		return bad("balance threshold %d < 0", c.BalanceThresholdBlocks)
	case c.SLOSeconds <= 0 || !finite(c.SLOSeconds):
		return bad("SLO must be > 0")
	}
	return nil
}

// TransferSeconds is the time to pull blocks prompt blocks between instances.
func (c RouteConfig) TransferSeconds(blocks int) float64 {
	return float64(blocks) * BlockTokens * c.KVBytesPerToken / c.BandwidthBytesPerSec
}

// InstanceView is what a router sees of one prefill instance when a
// request arrives.
type InstanceView struct {
	Queue  float64 // seconds of prefill work queued ahead (T_queue)
	Prefix int     // leading blocks of the request cached on the instance
}

// Choice is a router's decision for one request.
type Choice struct {
	Instance int
	Prefix   int     // blocks reused (local plus pulled)
	Pulled   int     // blocks pulled from Holder (0: none)
	Holder   int     // instance holding the best prefix
	Estimate float64 // TTFT_est in seconds
}

// estimate is the conductor's formula for instance i, given the best
// prefix over all instances.
func (c RouteConfig) estimate(inputLen int64, v InstanceView, best int) (prefix, pulled int, est float64) {
	prefix = v.Prefix
	var transfer float64
	if best-v.Prefix > c.BalanceThresholdBlocks {
		pulled = best - v.Prefix
		prefix = best
		transfer = c.TransferSeconds(pulled)
	}
	return prefix, pulled, transfer + v.Queue + c.Cost.Prefill(inputLen, int64(prefix)*BlockTokens)
}

// Pick applies router r to one request of inputLen tokens. next is the
// round-robin turn (used by RoundRobin only). Ties go to the lowest index.
func (c RouteConfig) Pick(r Router, inputLen int64, views []InstanceView, next int) Choice {
	best, holder := 0, 0
	for i, v := range views {
		if v.Prefix > best {
			best, holder = v.Prefix, i
		}
	}
	local := func(i int) Choice {
		v := views[i]
		return Choice{Instance: i, Prefix: v.Prefix, Holder: holder,
			Estimate: v.Queue + c.Cost.Prefill(inputLen, int64(v.Prefix)*BlockTokens)}
	}
	switch r {
	case RoundRobin:
		return local(next % len(views))
	case LeastLoaded:
		pick := 0
		for i, v := range views {
			if v.Queue < views[pick].Queue {
				pick = i
			}
		}
		return local(pick)
	case CacheAware:
		pick := 0
		for i, v := range views {
			p := views[pick]
			if v.Prefix > p.Prefix || (v.Prefix == p.Prefix && v.Queue < p.Queue) {
				pick = i
			}
		}
		return local(pick)
	}
	ch := Choice{Instance: -1, Holder: holder}
	for i, v := range views {
		prefix, pulled, est := c.estimate(inputLen, v, best)
		if ch.Instance < 0 || est < ch.Estimate {
			ch = Choice{Instance: i, Prefix: prefix, Pulled: pulled, Holder: holder, Estimate: est}
		}
	}
	return ch
}

// RouteResult is the outcome of one routing simulation.
type RouteResult struct {
	Router    Router
	Requests  int
	Served    int
	Rejected  int
	Blocks    int // blocks of served requests
	Hits      int // blocks reused (local prefix or pulled)
	Pulled    int // of Hits, blocks pulled from another instance
	WithinSLO int // served requests with TTFT <= SLO
	MeanTTFT  float64
	P90TTFT   float64
	// MeanIsolated is the mean prefill time with no queue and no cache:
	// the TTFT figures as a ratio to it show what queueing and reuse do.
	MeanIsolated float64
}

// HitRate is Hits/Blocks.
func (r RouteResult) HitRate() float64 {
	if r.Blocks == 0 {
		return 0
	}
	return float64(r.Hits) / float64(r.Blocks)
}

// SLOFraction is the share of all requests (rejected ones count as
// misses) served within the SLO.
func (r RouteResult) SLOFraction() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.WithinSLO) / float64(r.Requests)
}

// SimulateRouting replays reqs in timestamp order over c.Instances prefill
// instances, each running its prefills one at a time in arrival order
// (FIFO) with its own cache (c.InstancePolicy), and routes each request with r. TTFT is
// the model's: T_transfer + T_queue + T_prefill, so estimate and outcome
// agree. A served request's blocks are cached on its instance at dispatch
// (pulled ones too, so hot prefixes get replicated) and the holder's
// blocks it pulled from count as used.
func SimulateRouting(reqs []Request, r Router, c RouteConfig) (RouteResult, error) {
	if err := c.Validate(); err != nil {
		return RouteResult{}, err
	}
	caches := make([]*Cache, c.Instances)
	feed := c.Feed
	if feed == nil && c.EventsFed {
		feed = newEventFeed(c.Instances)
	}
	for i := range caches {
		caches[i] = NewCache(c.InstancePolicy, c.CapacityBlocks)
		if feed != nil {
			caches[i].Events = feed.Events(i)
		}
	}
	fed := make([]int, c.Instances)
	freeAt := make([]float64, c.Instances)
	views := make([]InstanceView, c.Instances)
	res := RouteResult{Router: r}
	var ttfts []float64
	var isolated float64
	for k, req := range Ordered(reqs) {
		now := float64(req.Timestamp) / 1000
		res.Requests++
		isolated += c.Cost.Prefill(req.InputLength, 0)
		if feed != nil {
			if err := feed.Prefixes(req.HashIDs, fed); err != nil {
				return res, err
			}
		}
		for i := range views {
			views[i] = InstanceView{Queue: max(0, freeAt[i]-now), Prefix: caches[i].Prefix(req.HashIDs)}
			if feed != nil {
				views[i].Prefix = fed[i]
			}
		}
		ch := c.Pick(r, req.InputLength, views, k)
		if c.Reject && ch.Estimate > c.SLOSeconds {
			res.Rejected++
			continue
		}
		res.Served++
		res.Blocks += len(req.HashIDs)
		res.Hits += ch.Prefix
		res.Pulled += ch.Pulled
		if ch.Pulled > 0 {
			caches[ch.Holder].AccessPrefix(req.HashIDs[:ch.Prefix])
		}
		caches[ch.Instance].Access(req.HashIDs)
		freeAt[ch.Instance] = now + ch.Estimate
		ttfts = append(ttfts, ch.Estimate)
		if ch.Estimate <= c.SLOSeconds {
			res.WithinSLO++
		}
	}
	if res.Requests > 0 {
		res.MeanIsolated = isolated / float64(res.Requests)
	}
	if len(ttfts) > 0 {
		var sum float64
		for _, t := range ttfts {
			sum += t
		}
		res.MeanTTFT = sum / float64(len(ttfts))
		slices.Sort(ttfts)
		res.P90TTFT = ttfts[nearestRank(len(ttfts), 0.90)]
	}
	return res, nil
}

// nearestRank is the index of the q-quantile of n sorted values.
func nearestRank(n int, q float64) int {
	i := int(math.Ceil(q*float64(n))) - 1
	return min(max(i, 0), n-1)
}
