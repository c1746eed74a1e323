package master

import (
	"slices"
	"strings"
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
// eviction freed nothing less than a second ago).
func (m *Master) evictAboveWatermarkLocked(now time.Time) {
	capacity, used := m.usageLocked()
	over := capacity > 0 && float64(used) > m.cfg.HighWatermark*float64(capacity)
	if !m.evictReq && (!over || now.Before(m.fruitlessUntil)) {
		return
	}
	m.evictReq = false
	m.offload = true // no put is waiting for this space: evicted objects may go to disk first
	freed := m.evictLocked(now, 0)
	m.offload = false
	if freed == 0 {
		// Everything left is leased, pinned or unfinished: do not sort
		// all objects again on every tick.
		m.fruitlessUntil = now.Add(time.Second)
	}
}

// evictLocked frees about EvictionRatio of the capacity (or target bytes
// when > 0), in the policy's order (least recently used first by default), never touching leased, unfinished or
// hard-pinned objects and taking soft-pinned ones only after all others.
func (m *Master) evictLocked(now time.Time, target uint64) uint64 {
	capacity, used := m.usageLocked()
	if target == 0 {
		target = uint64(m.cfg.EvictionRatio * float64(capacity))
	}
	m.stats.EvictionRuns++
	if m.stats.UtilisationAtFirstEviction == 0 && capacity > 0 {
		m.stats.UtilisationAtFirstEviction = float64(used) / float64(capacity)
	}
	var freed uint64
	for _, o := range m.evictionOrderLocked(now) {
		if freed >= target {
			break
		}
		freed += o.size * uint64(len(o.replicas))
		m.evicting = true
		m.freeLocked(o)
		m.evicting = false
		m.stats.Evictions++
	}
	m.stats.EvictedBytes += freed
	return freed
}

// evictionOrderLocked lists the objects eviction may take, in the order it
// takes them: unpinned ones first, then soft-pinned ones, each in the
// order of Config.EvictionPolicy. Leased, unfinished and hard-pinned
// objects are left out.
func (m *Master) evictionOrderLocked(now time.Time) []*object {
	var plain, pinned []*object
	for _, o := range m.objects {
		if !o.complete || o.hardPin || now.Before(o.leaseUntil) {
			continue
		}
		if now.Before(o.softPinUntil) {
			pinned = append(pinned, o)
		} else {
			plain = append(plain, o)
		}
	}
	return append(m.policyOrder(plain), m.policyOrder(pinned)...)
}

// policyOrder orders objs by the eviction policy (internal/evict): the
// objects enter it least recently used first, those last used at the same
// instant (one batch call) forming one group with their chain depths
// (TouchChains). LRU keeps that order; TailFirst takes the least recent
// group first and, inside it, the deepest block of a chain first.
func (m *Master) policyOrder(objs []*object) []*object {
	slices.SortFunc(objs, func(a, b *object) int {
		if c := a.lastAccess.Compare(b.lastAccess); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	pol, err := evict.New[*object](m.cfg.EvictionPolicy)
	if err != nil { // Validate refused it already
		return objs
	}
	var group uint64
	for i, o := range objs {
		if i == 0 || !o.lastAccess.Equal(objs[i-1].lastAccess) {
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
