package master

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvcache-go/mooncake/internal/evict"
)

// Evict runs one eviction now (as Tick does above the watermark, offloading
// to disk tiers) and returns the bytes freed.
func (m *Master) Evict() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.offload = true // no put waits for this space: offload where enabled
	defer func() { m.offload = false }()
	return m.evictLocked(m.clock.Now(), 0)
}

// evictAboveWatermarkLocked evicts when a put ran out of space since the
// last Tick, or when use is above HighWatermark (unless the last such
// eviction freed nothing less than a second ago), and goes on with the rest
// of a large eviction (evictDebt), one bounded round per Tick.
func (m *Master) evictAboveWatermarkLocked(now time.Time) {
	capacity, used := m.usageLocked()
	over := capacity > 0 && float64(used) > m.cfg.HighWatermark*float64(capacity)
	if !m.evictReq && m.evictDebt == 0 && (!over || now.Before(m.fruitlessUntil)) {
		return
	}
	m.evictReq = false
	m.offload = true // no put is waiting for this space: evicted objects may go to disk first
	freed := m.evictLocked(now, m.evictDebt)
	m.offload = false
	if freed == 0 {
		// Everything left is leased, pinned or unfinished: do not look at
		// the objects again on every tick.
		m.fruitlessUntil = now.Add(time.Second)
		m.evictDebt = 0
	}
}

// Eviction at scale. Up to evictExact objects, an eviction orders every
// evictable object by the policy (exact LRU or TailFirst). Above, ordering
// them all would hold the lock for O(n log n): a round instead samples
// evictSample objects (consecutive entries of the hash index from a random
// place: a random sample), orders the sample by the policy and evicts at most
// its first evictTake (Redis's approximated LRU, with a larger sample); one
// call runs at most evictRounds rounds, and what is left of its target
// becomes evictDebt, paid by the next Ticks (every 10ms).
const (
	evictExact  = 64 * 1024
	evictSample = 4096
	evictTake   = 1024
	evictRounds = 2
)

// evictLocked frees about EvictionRatio of the capacity (or target bytes
// when > 0), in the policy's order (least recently used first by default), never touching leased, unfinished or
// hard-pinned objects and taking soft-pinned ones only after all others.
// Above evictExact objects it frees at most evictRounds rounds and leaves
// the rest to the next Ticks (evictDebt).
func (m *Master) evictLocked(now time.Time, target uint64) uint64 {
	capacity, used := m.usageLocked()
	if target == 0 {
		target = uint64(m.cfg.EvictionRatio * float64(capacity))
	}
	m.stats.EvictionRuns++
	if m.stats.UtilisationAtFirstEviction == 0 && capacity > 0 {
		m.stats.UtilisationAtFirstEviction = float64(used) / float64(capacity)
	}
	var freed uint64 // allocated bytes, as the target
	evictOne := func(o *object) { freed += m.evictObjectLocked(o) }
	if m.objects.len() <= evictExact {
		for _, o := range m.evictionOrderLocked(now, -1) {
			if freed >= target {
				break
			}
			evictOne(o)
		}
		m.evictDebt = 0
	} else {
		for range evictRounds {
			order := m.evictionOrderLocked(now, evictSample)
			if len(order) == 0 {
				break
			}
			for _, o := range order[:min(len(order), evictTake)] {
				if freed >= target {
					break
				}
				evictOne(o)
			}
			if freed >= target {
				break
			}
		}
		m.evictDebt = 0
		if freed > 0 && freed < target {
			m.evictDebt = target - freed
		}
	}
	return freed
}

// evictObjectLocked evicts o and returns the allocated bytes it freed.
func (m *Master) evictObjectLocked(o *object) uint64 {
	var freed uint64
	for _, r := range m.reps(o) {
		freed += m.segOf(r).alloc.Rounded(o.alloc())
	}
	m.stats.EvictedBytes += o.size * uint64(o.nrep)
	m.evicting = true
	m.freeLocked(o)
	m.evicting = false
	m.stats.Evictions++
	return freed
}

// evictionOrderLocked lists the objects eviction may take, in the order it
// takes them: unpinned ones first, then soft-pinned ones, each in the
// order of Config.EvictionPolicy. Leased, unfinished and hard-pinned
// objects are left out. sample > 0 looks at that many objects only.
func (m *Master) evictionOrderLocked(now time.Time, sample int) []*object {
	var c evictCandidates
	take := func(o *object) bool {
		c.add(o, now)
		return true
	}
	if sample > 0 {
		m.objects.sample(rand.Uint64(), sample, take)
	} else {
		m.objects.each(take)
	}
	return m.tenantOverShareFirstLocked(m.candidateOrder(&c), now)
}

// evictCandidates gathers the objects an eviction may take, unpinned and
// soft-pinned apart; leased, unfinished and hard-pinned ones are left out.
type evictCandidates struct{ plain, pinned []*object }

func (c *evictCandidates) add(o *object, now time.Time) {
	switch {
	case !o.complete || o.hardPin || o.leaseUntil.after(now):
	case o.softPinUntil.after(now):
		c.pinned = append(c.pinned, o)
	default:
		c.plain = append(c.plain, o)
	}
}

// candidateOrder is the order eviction takes c in: the unpinned ones, then
// the soft-pinned ones, each in the policy's order.
func (m *Master) candidateOrder(c *evictCandidates) []*object {
	return append(m.policyOrder(c.plain), m.policyOrder(c.pinned)...)
}

// policyOrder orders objs by the eviction policy (internal/evict): the
// objects enter it least recently used first, those last used at the same
// instant (one batch call) forming one group with their chain depths
// (TouchChains). LRU keeps that order; TailFirst takes the least recent
// group first and, inside it, the deepest block of a chain first.
func (m *Master) policyOrder(objs []*object) []*object {
	slices.SortFunc(objs, func(a, b *object) int {
		if c := cmp.Compare(a.lastAccess, b.lastAccess); c != 0 {
			return c
		}
		return bytes.Compare(m.objects.keyBytes(a), m.objects.keyBytes(b))
	})
	pol, err := evict.New[*object](m.cfg.EvictionPolicy)
	if err != nil { // Validate refused it already
		return objs
	}
	var group uint64
	for i, o := range objs {
		if i == 0 || o.lastAccess != objs[i-1].lastAccess {
			group++
		}
		pol.Add(o, evict.Meta{Group: group, Depth: o.chainDepth()})
	}
	out := objs[:0]
	for {
		o, ok := pol.Victim()
		if !ok {
			return out
		}
		out = append(out, o)
	}
}
