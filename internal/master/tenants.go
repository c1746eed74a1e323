package master

import (
	"fmt"
	"slices"
	"time"

	"github.com/kvcache-go/mooncake/internal/storeerr"
	"github.com/kvcache-go/mooncake/internal/tenant"
)

// Per-tenant accounts (package internal/tenant names the tenants and their
// key namespaces). A tenant's charge is the memory bytes of its objects'
// replicas (value bytes times replicas, as Mooncake's charged_bytes) and
// its object count, complete objects and unfinished puts alike; it is kept
// where the gauges of counts.go change, so admission costs O(1). A key's
// tenant is read off its namespace prefix (tenant.Split); keys outside
// every namespace (the raw key space: admins, and every caller when no
// policy is configured) are not charged. Put slots (slot.go) are charged
// when they are committed to a key.

// Tenant quota errors (storeerr).
var (
	ErrTenantQuotaExceeded = storeerr.ErrTenantQuotaExceeded
	ErrTenantNotRegistered = storeerr.ErrTenantNotRegistered
)

// TenantQuotas gives a tenant's limits (0: none); ok is false for a name
// that has no policy, whose puts are refused with ErrTenantNotRegistered.
// It is called with the master's lock held, so it must not block or call
// the master.
type TenantQuotas interface {
	Limits(tenant string) (bytes, objects uint64, ok bool)
}

// TenantUsage is one tenant's account.
type TenantUsage struct {
	Tenant  string
	Bytes   uint64 // memory bytes charged (replicas of complete objects and unfinished puts)
	Objects int    // objects charged
	// Held is the bytes its freed objects left that no other tenant may
	// take yet (a grant on them may live), counted against its bytes quota
	// and share besides Bytes.
	Held uint64
	// Puts refused at admission since the accounting started: over the
	// bytes quota, over the objects quota, tenant not registered.
	RejectedBytes, RejectedObjects, RejectedUnregistered uint64
	// Evicted counts the objects the tenant's eviction watermark took
	// (Config.TenantHighWatermark), EvictedBytes their charged bytes.
	Evicted, EvictedBytes uint64
}

type tenantAcct struct {
	name    string
	bytes   uint64
	objects int
	// held: bytes its freed objects left that no other tenant may take
	// yet (scrub.go, grantHoldLocked), charged to its quota and its share
	// (tenantAdmitLocked, tenantOverShareFirstLocked) but not evicted for
	// by its watermark (no eviction frees them).
	held uint64
}

// charged is what a's quota and share are compared with.
func (a *tenantAcct) charged() uint64 { return a.bytes + a.held }

type tenantBook struct {
	q    TenantQuotas
	acct map[string]*tenantAcct
	// last is the account found last (nil: none), checked before the map:
	// a tenant's puts come in runs, and a commit finds its tenant's account
	// up to three times (admission, the replaced version, the new one).
	last    *tenantAcct
	pending map[string]uint64     // charge of each unfinished put, by key
	rejects map[string]*[3]uint64 // refused puts by tenant: bytes, objects, unregistered
	// cursor is where the last watermark eviction of each tenant stopped
	// in its namespace (tenant_evict.go); evicted counts the objects that
	// eviction took, by tenant.
	cursor  map[string]string
	evicted map[string]*[2]uint64 // objects, charged bytes
	goal    map[string]uint64     // the tenants that eviction brings down, to these bytes
	// The watermark scan's cycle (tenant_evict.go): when it started, the
	// names it goes through and how far it is, the sum of the quotas it
	// has met and the last whole cycle's.
	scanned         time.Time
	scanOrder       []string
	scanPos         int
	sumPrev, sumCur uint64
}

// reject counts a refused put of tenant t for reason (0 bytes, 1 objects,
// 2 unregistered).
func (b *tenantBook) reject(t string, reason int) {
	r := b.rejects[t]
	if r == nil {
		if len(b.rejects) >= 4*tenant.MaxTenants { // names of tenants long gone: start over
			clear(b.rejects)
		}
		r = new([3]uint64)
		b.rejects[t] = r
	}
	r[reason]++
}

// SetTenantQuotas turns per-tenant accounting and strict admission on
// (q nil: off, the default). Call it before the master takes puts: the
// accounts start from the objects present now.
func (m *Master) SetTenantQuotas(q TenantQuotas) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q == nil {
		m.tenants = nil
		return
	}
	m.tenants = &tenantBook{q: q, acct: map[string]*tenantAcct{}, pending: map[string]uint64{}, rejects: map[string]*[3]uint64{},
		cursor: map[string]string{}, evicted: map[string]*[2]uint64{}, goal: map[string]uint64{}}
	m.objects.each(func(o *object) bool {
		if o.complete {
			m.tenantCountLocked(o, 1)
		} else if _, ok := m.pending[o.id]; ok {
			m.tenantPendingLocked(o, m.keyOf(o))
		}
		return true
	})
	for _, s := range m.segOrder {
		for _, d := range s.dirty {
			if d.held {
				m.tenantHeldLocked(d.owner, int64(d.n))
			}
		}
	}
}

// TenantUsages lists the accounts of the tenants that hold anything or
// had puts refused.
func (m *Master) TenantUsages() []TenantUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tenants == nil {
		return nil
	}
	out := make([]TenantUsage, 0, len(m.tenants.acct))
	at := make(map[string]int, len(m.tenants.acct)) // index in out (the refused puts' tenants may number thousands)
	for name, a := range m.tenants.acct {
		at[name] = len(out)
		out = append(out, TenantUsage{Tenant: name, Bytes: a.bytes, Objects: a.objects, Held: a.held})
	}
	for name, r := range m.tenants.rejects {
		i, ok := at[name]
		if !ok {
			at[name] = len(out)
			out, i = append(out, TenantUsage{Tenant: name}), len(out)
		}
		out[i].RejectedBytes, out[i].RejectedObjects, out[i].RejectedUnregistered = r[0], r[1], r[2]
	}
	for name, e := range m.tenants.evicted {
		i, ok := at[name]
		if !ok {
			out, i = append(out, TenantUsage{Tenant: name}), len(out)
		}
		out[i].Evicted, out[i].EvictedBytes = e[0], e[1]
	}
	slices.SortFunc(out, func(a, b TenantUsage) int {
		if a.Tenant < b.Tenant {
			return -1
		}
		return 1
	})
	return out
}

// lookup is name's account, nil when it has none.
func (b *tenantBook) lookup(name string) *tenantAcct {
	if a := b.last; a != nil && a.name == name {
		return a
	}
	a := b.acct[name]
	if a != nil {
		b.last = a
	}
	return a
}

// account is name's account, made when it has none.
func (b *tenantBook) account(name string) *tenantAcct {
	a := b.lookup(name)
	if a == nil {
		a = &tenantAcct{name: name}
		b.acct[name] = a
		b.last = a
	}
	return a
}

// accountBytes is account for a name read off a key in the object table's
// arena (found without copying it; copied only for a new account).
func (b *tenantBook) accountBytes(name []byte) *tenantAcct {
	if a := b.last; a != nil && a.name == string(name) {
		return a
	}
	if a := b.acct[string(name)]; a != nil {
		b.last = a
		return a
	}
	return b.account(string(name))
}

// charge adds n bytes and k objects (negative: takes them away) to name.
func (b *tenantBook) charge(name string, n int64, k int) { b.add(b.account(name), n, k) }

// add adds n bytes and k objects (negative: takes them away) to a.
func (b *tenantBook) add(a *tenantAcct, n int64, k int) {
	a.bytes = uint64(max(int64(a.bytes)+n, 0))
	a.objects = max(a.objects+k, 0)
	if a.bytes == 0 && a.objects == 0 && a.held == 0 {
		delete(b.acct, a.name)
		if b.last == a {
			b.last = nil
		}
	}
}

// tenantHeldLocked adds n held bytes (negative: takes them away) to the
// account of owner (a dirty extent's: a tenant's name, "" or noOwner for
// none).
func (m *Master) tenantHeldLocked(owner string, n int64) {
	if m.tenants == nil || owner == "" || owner == noOwner {
		return
	}
	a := m.tenants.account(owner)
	a.held = uint64(max(int64(a.held)+n, 0))
	m.tenants.add(a, 0, 0) // forgets an empty account
}

// tenantOfLocked is the tenant name of o's key, read in place ("" or nil
// outside every namespace); it is only valid until the table changes.
func (m *Master) tenantOfLocked(o *object) []byte {
	t, _ := tenant.SplitBytes(m.objects.keyBytes(o))
	return t
}

// acctOfLocked is the account of o's key's tenant (made when it has none),
// nil outside every namespace. A key of the account found last is told by
// comparing its namespace in place.
func (m *Master) acctOfLocked(o *object) *tenantAcct {
	if a := m.tenants.last; a != nil && tenant.InNamespace(m.objects.keyBytes(o), a.name) {
		return a
	}
	if t := m.tenantOfLocked(o); len(t) > 0 {
		return m.tenants.accountBytes(t)
	}
	return nil
}

// tenantCountLocked is countLocked's part for the tenant of o.
func (m *Master) tenantCountLocked(o *object, sign int) {
	if m.tenants == nil {
		return
	}
	if a := m.acctOfLocked(o); a != nil {
		m.tenants.add(a, int64(sign)*int64(o.size)*int64(o.nrep), sign)
	}
}

// tenantReplicasLocked is replicasChangedLocked's part.
func (m *Master) tenantReplicasLocked(o *object, delta int) {
	if m.tenants == nil {
		return
	}
	if a := m.acctOfLocked(o); a != nil {
		m.tenants.add(a, int64(delta)*int64(o.size), 0)
	}
}

// tenantPendingLocked is addPendingLocked's part: an unfinished put is
// charged what it holds until it ends (dropPendingLocked).
func (m *Master) tenantPendingLocked(o *object, key string) {
	if m.tenants == nil {
		return
	}
	t, _ := tenant.Split(key)
	if t == "" {
		return
	}
	if old, ok := m.tenants.pending[key]; ok {
		m.tenants.charge(t, -int64(old), -1)
	}
	c := o.size * uint64(o.nrep)
	m.tenants.pending[key] = c
	m.tenants.charge(t, int64(c), 1)
}

// tenantUnpendLocked is dropPendingLocked's part.
func (m *Master) tenantUnpendLocked(key string) {
	if m.tenants == nil {
		return
	}
	t, _ := tenant.Split(key)
	if t == "" { // put slots and the raw key space: never charged while pending
		return
	}
	c, ok := m.tenants.pending[key]
	if !ok {
		return
	}
	delete(m.tenants.pending, key)
	m.tenants.charge(t, -int64(c), -1)
}

// tenantAdmitLocked is strict admission: a put of key holding n more
// bytes (and one more object unless it replaces one, credit being what the
// replaced object is charged) fails at once when it would take the key's
// tenant past a quota.
func (m *Master) tenantAdmitLocked(key string, n uint64, credit *object) error {
	if m.tenants == nil {
		return nil
	}
	var t string
	if a := m.tenants.last; a != nil && tenant.InNamespace(key, a.name) {
		t = a.name
	} else if t, _ = tenant.Split(key); t == "" {
		return nil
	}
	qb, qo, ok := m.tenants.q.Limits(t)
	if !ok {
		m.tenants.reject(t, 2)
		return fmt.Errorf("%w: %q", ErrTenantNotRegistered, t)
	}
	var used uint64
	objects := 1
	a := m.tenants.lookup(t)
	if a != nil {
		used, objects = a.charged(), a.objects+1
	}
	if credit != nil && credit.complete {
		used -= min(used, credit.size*uint64(credit.nrep))
		objects--
	}
	if qb > 0 && used+n > qb && a != nil && a.held > 0 {
		held := a.held // may count holds that ended: settled only here, where it decides
		m.settleAllHeldLocked()
		used -= held - a.held
	}
	if qb > 0 && used+n > qb {
		m.tenants.reject(t, 0)
		return fmt.Errorf("%w: tenant %q holds %d of %d bytes (with what its freed objects left that is not reusable yet), the put needs %d", ErrTenantQuotaExceeded, t, used, qb, n)
	}
	if qo > 0 && uint64(objects) > qo {
		m.tenants.reject(t, 1)
		return fmt.Errorf("%w: tenant %q holds %d of %d objects", ErrTenantQuotaExceeded, t, objects-1, qo)
	}
	return nil
}

// EffectiveQuota is a byte quota scaled down in proportion when the
// quotas (sum) add up to more than the pool's capacity (Mooncake's
// effective quota, in whole bytes).
func EffectiveQuota(quota, sum, capacity uint64) uint64 {
	if sum > capacity && capacity > 0 {
		return uint64(float64(quota) / float64(sum) * float64(capacity))
	}
	return quota
}

// tenantOverShareFirstLocked reorders an eviction order so that the
// objects of the tenants above their share come first (in their order),
// then the others (in theirs). A tenant's share is its byte quota scaled
// down, when the quotas add up to more than the capacity, in proportion
// (Mooncake's effective quota); a tenant without a byte quota shares what
// the quotas leave equally with the other such tenants.
func (m *Master) tenantOverShareFirstLocked(order []*object, now time.Time) []*object {
	if m.tenants == nil || len(m.tenants.acct) == 0 {
		return order
	}
	capacity, _ := m.usageLocked()
	m.settleAllHeldLocked()
	var sumQuota uint64
	unquoted := 0
	quota := make(map[string]uint64, len(m.tenants.acct))
	for name := range m.tenants.acct {
		qb, _, _ := m.tenants.q.Limits(name)
		quota[name] = qb
		if qb == 0 {
			unquoted++
		}
		sumQuota += qb
	}
	over := make(map[string]bool, len(quota))
	for name, qb := range quota {
		share := qb
		switch {
		case qb > 0:
			share = EffectiveQuota(qb, sumQuota, capacity)
		case qb == 0:
			share = (capacity - min(capacity, sumQuota)) / uint64(unquoted)
		}
		over[name] = m.tenants.acct[name].charged() > share
	}
	first := make([]*object, 0, len(order))
	var rest []*object
	for _, o := range order {
		if t := m.tenantOfLocked(o); len(t) > 0 && over[string(t)] {
			first = append(first, o)
		} else {
			rest = append(rest, o)
		}
	}
	return append(first, rest...)
}
