package master

import (
	"slices"
	"strings"
	"time"
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
// when > 0), least recently used first, never touching leased, unfinished or
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
// takes them: unpinned ones least recently used first, then soft-pinned
// ones likewise. Leased, unfinished and hard-pinned objects are left out.
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
	lru := func(a, b *object) int {
		if c := a.lastAccess.Compare(b.lastAccess); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	}
	slices.SortFunc(plain, lru)
	slices.SortFunc(pinned, lru)
	return append(plain, pinned...)
}
