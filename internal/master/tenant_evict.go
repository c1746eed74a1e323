package master

import (
	"slices"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/tenant"
)

// Per-tenant eviction watermark (Mooncake's
// tenant_eviction_high_watermark_ratio). Admission is strict: a put that
// would take its tenant past its byte quota fails at once. So that a
// tenant that keeps writing (a KV cache that fills its quota and goes on
// caching) keeps room for its next puts, every Tick looks at the tenants
// whose charged bytes exceed TenantHighWatermark of their effective byte
// quota and evicts their own objects until they hold (TenantHighWatermark
// - EvictionRatio) of it, in the eviction policy's order (least recently
// used first), never a leased, unfinished or hard-pinned object and
// soft-pinned ones after the others, as the pool's eviction does, and
// never an object written less than a LeaseTTL ago: a tenant writing
// faster than its quota allows has its puts refused (TENANT_QUOTA_EXCEEDED)
// rather than its newest objects evicted as they arrive, acknowledged and
// gone before their first read (Mooncake's issue 3741). A
// tenant's effective quota is its byte quota scaled down in proportion
// when the quotas of the tenants holding anything add up to more than the
// pool (the share the pool's eviction charges first beyond).
//
// Bounded work under the lock: a Tick walks at most evictSample keys of
// the tenants over their watermark, in the key index, from where the last
// walk of that tenant stopped (wrapping around its namespace): keys are
// hashes, so a window of consecutive keys is a random sample of the
// tenant's objects, which the policy orders (Redis's approximated LRU, as
// the pool's eviction above evictExact objects); what is left is done by
// the next Ticks.

// The accounts are compared with their watermarks in cycles that start at
// most every tenantScanEvery, tenantScanChunk accounts a Tick (a quota
// look-up each), so that thousands of tenants cost the lock a few tens of
// microseconds a Tick rather than one long hold.
const (
	tenantScanEvery = 100 * time.Millisecond
	tenantScanChunk = 256
)

// tenantScanLocked compares the next chunk of the tenants' accounts with
// their watermarks and sets the goals of those above. A tenant's effective
// quota scales its quota down when the quotas of the tenants holding
// anything add up to more than the pool: the sum is the last whole
// cycle's, or this one's when the cycle is one chunk.
func (m *Master) tenantScanLocked(now time.Time) {
	b := m.tenants
	if b.scanPos >= len(b.scanOrder) {
		if now.Sub(b.scanned) < tenantScanEvery && !now.Before(b.scanned) {
			return
		}
		b.scanned = now
		b.scanOrder = b.scanOrder[:0]
		for name := range b.acct {
			b.scanOrder = append(b.scanOrder, name)
		}
		b.scanPos, b.sumPrev, b.sumCur = 0, b.sumCur, 0
	}
	chunk := b.scanOrder[b.scanPos:min(len(b.scanOrder), b.scanPos+tenantScanChunk)]
	b.scanPos += len(chunk)
	whole := b.scanPos == len(chunk) && b.scanPos == len(b.scanOrder)
	type lim struct {
		a  *tenantAcct
		qb uint64
	}
	lims := make([]lim, 0, len(chunk))
	for _, name := range chunk {
		a := b.acct[name]
		if a == nil {
			continue
		}
		if qb, _, ok := b.q.Limits(name); ok && qb > 0 {
			lims = append(lims, lim{a, qb})
			b.sumCur += qb
		}
	}
	sum := b.sumPrev
	if whole {
		sum = b.sumCur
	}
	capacity, _ := m.usageLocked()
	for _, l := range lims {
		eff := float64(EffectiveQuota(l.qb, sum, capacity))
		if float64(l.a.bytes) > m.cfg.TenantHighWatermark*eff {
			b.goal[l.a.name] = uint64(max(0, m.cfg.TenantHighWatermark-m.cfg.EvictionRatio) * eff)
		}
	}
}

// tenantEvictLocked runs the per-tenant watermark eviction (see above). A
// tenant found above its watermark keeps its goal until it is down to it
// (the next Ticks go on where a bounded one stopped), or until a walk of
// its whole namespace found nothing it may evict.
func (m *Master) tenantEvictLocked(now time.Time) {
	b := m.tenants
	if b == nil || m.cfg.TenantHighWatermark < 0 || (len(b.acct) == 0 && len(b.goal) == 0) {
		return
	}
	m.tenantScanLocked(now)
	if len(b.goal) == 0 {
		return
	}
	names := make([]string, 0, len(b.goal))
	for name := range b.goal {
		names = append(names, name)
	}
	slices.Sort(names)
	budget := evictSample
	for _, name := range names {
		if a := b.lookup(name); a == nil || a.bytes <= b.goal[name] {
			delete(b.goal, name)
			continue
		}
		if budget <= 0 {
			continue
		}
		seen, done := m.evictTenantLocked(now, name, b.goal[name], max(budget/len(names), evictTake))
		budget -= seen
		if done {
			delete(b.goal, name)
		}
	}
}

// evictTenantLocked evicts tenant name's objects, from a window of at most
// look of its keys after its cursor, until its charged bytes are at most
// goal. It returns the keys it looked at, and done when the tenant is down
// to its goal or the window held its whole namespace and nothing more can
// be evicted from it now.
func (m *Master) evictTenantLocked(now time.Time, name string, goal uint64, look int) (seen int, done bool) {
	b := m.tenants
	ns := tenant.Namespace(name)
	from := b.cursor[name]
	if !strings.HasPrefix(from, ns) {
		from = ns
	}
	var c evictCandidates
	var last []byte // the last key looked at (copied: arena bytes move)
	fresh := now.Add(-m.cfg.LeaseTTL)
	// walk looks at the keys of the namespace from pivot (excluded when it
	// is the cursor) up to, not including, stop ("": the namespace's end).
	walk := func(pivot, stop string) {
		first := true
		m.index.ascendRecs(pivot, look-seen, func(o *object, k []byte) bool {
			if first {
				if first = false; string(k) == pivot && pivot != ns {
					return true // the cursor itself was looked at last time
				}
			}
			if !strings.HasPrefix(string(k), ns) || seen >= look || (stop != "" && string(k) >= stop) {
				return false
			}
			seen++
			last = append(last[:0], k...)
			if o != nil && !o.created.after(fresh) {
				c.add(o, now)
			}
			return true
		})
	}
	walk(from, "")
	whole := false
	if seen < look { // the end of the namespace: on from its start, up to the cursor
		if from != ns {
			walk(ns, from)
		}
		whole = seen < look
	}
	if len(b.cursor) >= 4*tenant.MaxTenants { // tenants long gone: start over
		clear(b.cursor)
	}
	if whole {
		delete(b.cursor, name)
	} else {
		b.cursor[name] = string(last)
	}
	m.offload = true // no put waits for this space: evicted objects may go to disk first
	defer func() { m.offload = false }()
	for _, o := range m.candidateOrder(&c) {
		if a := b.lookup(name); a == nil || a.bytes <= goal {
			return seen, true
		}
		charged := o.size * uint64(o.nrep) // before the object goes
		m.evictObjectLocked(o)
		e := b.evicted[name]
		if e == nil {
			if len(b.evicted) >= 4*tenant.MaxTenants {
				clear(b.evicted)
			}
			e = new([2]uint64)
			b.evicted[name] = e
		}
		e[0]++
		e[1] += charged
	}
	a := b.lookup(name)
	return seen, a == nil || a.bytes <= goal || whole
}
