package master

import (
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/tenant"
)

type quotaMap map[string][2]uint64

func (q quotaMap) Limits(t string) (uint64, uint64, bool) {
	l, ok := q[t]
	return l[0], l[1], ok
}

func TestTenantQuotaAdmission(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Durable = false
	m, _ := newTestMaster(t, cfg, map[string]uint64{"s1": 1 << 20})
	m.SetTenantQuotas(quotaMap{"a": {10 << 10, 0}, "b": {0, 3}})
	a, b := tenant.Namespace("a"), tenant.Namespace("b")
	// a: 10 KiB. Two 4 KiB puts fit, the third fails at once.
	mustPut(t, m, a+"1", 4<<10, ReplicateConfig{})
	mustPut(t, m, a+"2", 4<<10, ReplicateConfig{})
	if _, err := m.PutStart("w", a+"3", 4<<10, ReplicateConfig{}); !errors.Is(err, ErrTenantQuotaExceeded) || Code(err) != -1700 {
		t.Fatalf("over quota: %v (code %d)", err, Code(err))
	}
	// An unfinished put is charged too.
	if _, err := m.PutStart("w", a+"3", 2<<10, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutStart("w", a+"4", 1, ReplicateConfig{}); !errors.Is(err, ErrTenantQuotaExceeded) {
		t.Fatalf("pending not charged: %v", err)
	}
	if err := m.PutRevoke("w", a+"3"); err != nil {
		t.Fatal(err)
	}
	// b: 3 objects, any size; a's exhaustion does not touch b.
	for i := range 3 {
		mustPut(t, m, fmt.Sprintf("%s%d", b, i), 64<<10, ReplicateConfig{})
	}
	if _, err := m.PutStart("w", b+"x", 1, ReplicateConfig{}); !errors.Is(err, ErrTenantQuotaExceeded) {
		t.Fatalf("object quota: %v", err)
	}
	// Removal gives room back.
	if err := m.Remove(a+"1", false); err != nil {
		t.Fatal(err)
	}
	mustPut(t, m, a+"5", 4<<10, ReplicateConfig{})
	// Unknown tenants and the raw key space.
	if _, err := m.PutStart("w", tenant.Namespace("gone")+"k", 1, ReplicateConfig{}); !errors.Is(err, ErrTenantNotRegistered) || Code(err) != -1701 {
		t.Fatalf("unregistered: %v", err)
	}
	mustPut(t, m, "raw-key", 128<<10, ReplicateConfig{})
	got := map[string]TenantUsage{}
	for _, u := range m.TenantUsages() {
		got[u.Tenant] = u
	}
	if got["a"].Bytes != 8<<10 || got["a"].Objects != 2 || got["b"].Objects != 3 || got["b"].Bytes != 3*64<<10 || len(got) != 3 {
		t.Fatalf("usage %+v", got)
	}
	if got["a"].RejectedBytes != 2 || got["b"].RejectedObjects != 1 || got["gone"].RejectedUnregistered != 1 || got["gone"].Objects != 0 {
		t.Fatalf("refusals %+v", got)
	}
	// Accounting rebuilt from the objects present gives the same figures.
	m.SetTenantQuotas(quotaMap{"a": {10 << 10, 0}, "b": {0, 3}})
	for _, u := range m.TenantUsages() {
		if k := got[u.Tenant]; u.Bytes != k.Bytes || u.Objects != k.Objects {
			t.Fatalf("rebuilt %+v, kept %+v", u, k)
		}
	}
}

// TestTenantSlotCommitAdmission: a put through a slot is admitted at its
// commit.
func TestTenantSlotCommitAdmission(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Durable = false
	m, _ := newTestMaster(t, cfg, map[string]uint64{"s1": 1 << 20})
	m.SetTenantQuotas(quotaMap{"a": {6 << 10, 0}})
	a := tenant.Namespace("a")
	mustPut(t, m, a+"1", 4<<10, ReplicateConfig{})
	slot, _, err := m.PutReserveIn("w", a, 4<<10, len(a)+1, ReplicateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, gone, err := m.PutCommit("w", a+"2", slot, 0, ReplicateConfig{}, false); gone || !errors.Is(err, ErrTenantQuotaExceeded) {
		t.Fatalf("commit over quota: gone %v, %v", gone, err)
	}
	if ok, _ := m.Exist(a + "2"); ok {
		t.Fatal("a refused commit left the key")
	}
}

// TestTenantEvictionOverShareFirst: eviction takes the objects of the
// tenant above its share before older objects of a tenant within it.
func TestTenantEvictionOverShareFirst(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Durable = false
	cfg.EvictionRatio = 0.1
	m, clk := newTestMaster(t, cfg, map[string]uint64{"s1": 2 << 20})
	m.SetTenantQuotas(quotaMap{"small": {1 << 20, 0}, "big": {0, 0}})
	s, b := tenant.Namespace("small"), tenant.Namespace("big")
	for i := range 4 { // small: 256 KiB of its 1 MiB, written first (least recent)
		mustPut(t, m, fmt.Sprintf("%s%d", s, i), 64<<10, ReplicateConfig{})
	}
	clk.Advance(time.Second)
	for i := range 20 { // big: 1.25 MiB; its share is what the quotas leave, 1 MiB
		mustPut(t, m, fmt.Sprintf("%s%d", b, i), 64<<10, ReplicateConfig{})
	}
	clk.Advance(time.Second)
	if freed := m.Evict(); freed == 0 {
		t.Fatal("nothing evicted")
	}
	for i := range 4 {
		if ok, _ := m.Exist(fmt.Sprintf("%s%d", s, i)); !ok {
			t.Fatalf("small's object %d was evicted while big is above its share", i)
		}
	}
	if ok, _ := m.Exist(b + "0"); ok {
		t.Fatal("big's least recent object survived")
	}
}

// TestTenantSlotReuse: a tenant's upserts reuse their replaced versions as
// put slots, the accounts stay exact (one object, its bytes), and a commit
// through a reused slot is still admitted against the quota.
func TestTenantSlotReuse(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Durable = true
	m, _ := newTestMaster(t, cfg, map[string]uint64{"s1": 1 << 20})
	m.SetTenantQuotas(quotaMap{"a": {4 << 10, 0}})
	key := tenant.Namespace("a") + "k"
	_, slot, _ := upsertChain(t, m, "w", key, 1<<10, 5)
	if r := m.Stats().SlotsReused; r != 4 {
		t.Fatalf("slots reused %d, want 4 (puts 2..5 replaced a version)", r)
	}
	u := m.TenantUsages()
	if len(u) != 1 || u[0].Tenant != "a" || u[0].Objects != 1 || u[0].Bytes != 1<<10 {
		t.Fatalf("usage after upserts through reused slots: %+v", u)
	}
	// The client's reused slot committed to a second key would take the
	// tenant to 2 KiB of its 4: admitted; a third key of 3 KiB is not.
	c := m.CommitNext("w", tenant.Namespace("a")+"j", slot, 1, ReplicateConfig{}, true, SlotAsk{})
	if c.Err != nil || c.Gone {
		t.Fatalf("commit of a reused slot to a new key: %+v", c)
	}
	mustPut(t, m, tenant.Namespace("a")+"x", 1<<10, ReplicateConfig{})
	if _, err := m.PutStart("w", tenant.Namespace("a")+"y", 2<<10, ReplicateConfig{}); !errors.Is(err, ErrTenantQuotaExceeded) {
		t.Fatalf("over quota after reused slots: %v", err)
	}
	u = m.TenantUsages()
	if u[0].Objects != 3 || u[0].Bytes != 3<<10 {
		t.Fatalf("usage %+v, want 3 objects of 1 KiB", u)
	}
	// Rebuilt from the objects present: the same.
	m.SetTenantQuotas(quotaMap{"a": {4 << 10, 0}})
	if v := m.TenantUsages(); v[0].Objects != 3 || v[0].Bytes != 3<<10 {
		t.Fatalf("rebuilt usage %+v", v)
	}
}

// TestTenantAccountsInTurn: the accounts stay exact while tenants with
// names that prefix each other take turns, an account emptied (and so
// dropped) comes back, and a quota is enforced on the tenant found by the
// last use as on any other.
func TestTenantAccountsInTurn(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Durable = false
	m, _ := newTestMaster(t, cfg, map[string]uint64{"s1": 4 << 20})
	m.SetTenantQuotas(quotaMap{"a": {0, 2}, "ab": {0, 0}, "b": {0, 0}})
	ns := map[string]string{"a": tenant.Namespace("a"), "ab": tenant.Namespace("ab"), "b": tenant.Namespace("b")}
	want := map[string]int{}
	check := func(step string) {
		t.Helper()
		got := map[string]int{}
		for _, u := range m.TenantUsages() {
			if u.Objects > 0 || u.Bytes > 0 {
				got[u.Tenant] = u.Objects
				if u.Bytes != uint64(u.Objects)*1024 {
					t.Fatalf("%s: %s holds %d bytes for %d objects", step, u.Tenant, u.Bytes, u.Objects)
				}
			}
		}
		for n, k := range want {
			if k == 0 {
				delete(want, n)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: accounts %v, want %v", step, got, want)
		}
	}
	for i := range 3 {
		for _, n := range []string{"ab", "a", "b", "a", "ab"} {
			k := fmt.Sprintf("%sk%d-%d", ns[n], i, want[n])
			_, err := m.PutStart("w", k, 1024, ReplicateConfig{})
			if n == "a" && want["a"] == 2 {
				if !errors.Is(err, ErrTenantQuotaExceeded) {
					t.Fatalf("a's third object: %v", err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := m.PutEnd("w", k, 1); err != nil {
				t.Fatal(err)
			}
			want[n]++
		}
		check(fmt.Sprintf("round %d puts", i))
		// Empty a (its account goes), then b: the next round starts over.
		for _, n := range []string{"a", "b"} {
			if _, err := m.RemoveByRegex("^"+regexp.QuoteMeta(ns[n]), true); err != nil {
				t.Fatal(err)
			}
			want[n] = 0
			check(fmt.Sprintf("round %d without %s", i, n))
		}
	}
}

// TestTenantHighWatermark: a tick evicts the objects of a tenant above its
// own watermark (90% of its quota by default), least recently used first,
// down to 85%, never a leased one, and leaves the tenants below theirs
// alone; the tenant then has room for its next puts. Off with a negative
// watermark.
func TestTenantHighWatermark(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Durable = false
	cfg.LeaseTTL = 100 * time.Millisecond
	m, clk := newTestMaster(t, cfg, map[string]uint64{"s1": 4 << 20})
	m.SetTenantQuotas(quotaMap{"a": {1 << 20, 0}, "b": {1 << 20, 0}, "c": {256 << 10, 0}})
	a, b, c := tenant.Namespace("a"), tenant.Namespace("b"), tenant.Namespace("c")
	for i := range 15 { // a: 960 KiB of 1 MiB, above 90%
		mustPut(t, m, fmt.Sprintf("%s%02d", a, i), 64<<10, ReplicateConfig{})
		clk.Advance(time.Millisecond)
	}
	for i := range 10 { // b: 640 KiB, below
		mustPut(t, m, fmt.Sprintf("%s%02d", b, i), 64<<10, ReplicateConfig{})
	}
	for i := range 4 { // c: all of its 256 KiB, every object leased (below)
		mustPut(t, m, fmt.Sprintf("%s%02d", c, i), 64<<10, ReplicateConfig{})
	}
	// Objects written less than a LeaseTTL ago are not evicted.
	m.Tick()
	if u := m.TenantUsages(); u[0].Tenant != "a" || u[0].Objects != 15 {
		t.Fatalf("fresh objects evicted: %+v", u)
	}
	clk.Advance(2 * cfg.LeaseTTL)
	for i := range 4 {
		if _, err := m.GetReplicaList(fmt.Sprintf("%s%02d", c, i)); err != nil {
			t.Fatal(err)
		}
	}
	m.Tick()
	usage := func() map[string]TenantUsage {
		got := map[string]TenantUsage{}
		for _, u := range m.TenantUsages() {
			got[u.Tenant] = u
		}
		return got
	}
	u := usage()
	// 960 KiB down to at most 870 KiB (85%): the two least recent go.
	if u["a"].Objects != 13 || u["a"].Bytes != 13*64<<10 || u["a"].Evicted != 2 || u["a"].EvictedBytes != 2*64<<10 {
		t.Fatalf("a after the tick: %+v", u["a"])
	}
	for i := range 15 {
		if ok, _ := m.Exist(fmt.Sprintf("%s%02d", a, i)); ok != (i >= 2) {
			t.Fatalf("a's object %d present %v", i, ok)
		}
	}
	if u["b"].Objects != 10 || u["b"].Evicted != 0 || u["c"].Objects != 4 || u["c"].Evicted != 0 {
		t.Fatalf("b %+v, c %+v: below the watermark, or leased, and evicted", u["b"], u["c"])
	}
	mustPut(t, m, a+"next", 64<<10, ReplicateConfig{})

	off := DefaultConfig()
	off.Durable = false
	off.TenantHighWatermark = -1
	m2, clk2 := newTestMaster(t, off, map[string]uint64{"s1": 4 << 20})
	m2.SetTenantQuotas(quotaMap{"a": {1 << 20, 0}})
	for i := range 16 {
		mustPut(t, m2, fmt.Sprintf("%s%02d", a, i), 64<<10, ReplicateConfig{})
	}
	clk2.Advance(time.Millisecond)
	m2.Tick()
	if u := m2.TenantUsages(); len(u) != 1 || u[0].Objects != 16 || u[0].Evicted != 0 {
		t.Fatalf("watermark off: %+v", u)
	}
	if _, err := m2.PutStart("w", a+"x", 1, ReplicateConfig{}); !errors.Is(err, ErrTenantQuotaExceeded) {
		t.Fatalf("at its quota with the watermark off: %v", err)
	}
}

// TestTenantHighWatermarkBounded: a tick looks at no more than evictSample
// keys of the tenants over their watermark, whatever their number of
// objects; the next ticks go on from where it stopped (around the
// namespace) until the tenant is down to its goal.
func TestTenantHighWatermarkBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Durable = false
	cfg.TenantHighWatermark = 0.5
	cfg.EvictionRatio = 0.3 // goal: 20% of the quota
	cfg.LeaseTTL = 100 * time.Millisecond
	const n = 3 * evictSample
	m, clk := newTestMaster(t, cfg, map[string]uint64{"s1": 64 << 20})
	m.SetTenantQuotas(quotaMap{"a": {n << 10, 0}})
	a := tenant.Namespace("a")
	for i := range n {
		mustPut(t, m, fmt.Sprintf("%s%08x", a, uint32(i)*2654435761), 1<<10, ReplicateConfig{})
	}
	clk.Advance(2 * cfg.LeaseTTL)
	goal := uint64(n<<10) / 5
	for tick := 1; ; tick++ {
		before := m.TenantUsages()[0].Evicted
		m.Tick()
		u := m.TenantUsages()[0]
		if u.Evicted-before > evictSample {
			t.Fatalf("tick %d evicted %d objects: more than it may look at", tick, u.Evicted-before)
		}
		if u.Bytes <= goal {
			if tick < 2 {
				t.Fatalf("down to the goal in %d tick(s): the window is not bounded", tick)
			}
			break
		}
		if tick > 10 {
			t.Fatalf("after %d ticks a holds %d bytes, goal %d", tick, u.Bytes, goal)
		}
	}
}

// TestTenantHighWatermarkWraps: a walk that starts from the cursor of an
// earlier one and reaches the end of the namespace goes on from its start
// up to the cursor, never past it: each object is looked at once (none
// evicted twice), and the accounts match what is left.
func TestTenantHighWatermarkWraps(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Durable = false
	cfg.LeaseTTL = 100 * time.Millisecond
	m, clk := newTestMaster(t, cfg, map[string]uint64{"s1": 4 << 20})
	m.SetTenantQuotas(quotaMap{"a": {100 << 10, 0}})
	a := tenant.Namespace("a")
	for i := 99; i >= 0; i-- { // 100 KiB: all of the quota; the keys after the cursor the least recent
		mustPut(t, m, fmt.Sprintf("%s%03d", a, i), 1<<10, ReplicateConfig{})
		clk.Advance(time.Millisecond)
	}
	clk.Advance(2 * cfg.LeaseTTL)
	m.mu.Lock()
	m.tenants.cursor["a"] = a + "050" // as a bounded walk before would have left it
	seen, done := m.evictTenantLocked(clk.Now(), "a", 85<<10, evictSample)
	m.mu.Unlock()
	if seen != 99 || !done { // every key once but the cursor's, which the walk that left it looked at
		t.Fatalf("the walk looked at %d keys of 100 (done %v)", seen, done)
	}
	u := m.TenantUsages()[0]
	if u.Objects+int(u.Evicted) != 100 || u.Bytes != uint64(u.Objects)<<10 || u.Bytes > 85<<10 {
		t.Fatalf("after a wrapped walk: %+v", u)
	}
	n, _ := m.List(a, "", 1000)
	if len(n) != u.Objects {
		t.Fatalf("%d objects listed, %d counted", len(n), u.Objects)
	}
	// The least recently used went first.
	for i := 85; i < 100; i++ {
		if ok, _ := m.Exist(fmt.Sprintf("%s%03d", a, i)); ok {
			t.Fatalf("object %d, among the least recent, survived", i)
		}
	}
}

// countingQuotas counts the quota look-ups.
type countingQuotas struct {
	quotaMap
	n int
}

func (q *countingQuotas) Limits(t string) (uint64, uint64, bool) {
	q.n++
	return q.quotaMap.Limits(t)
}

// TestTenantWatermarkScanRate: the accounts are compared with their
// watermarks once per tenantScanEvery, not on every Tick (a master with
// thousands of tenants would otherwise look each one's quota up a hundred
// times a second under its lock).
func TestTenantWatermarkScanRate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Durable = false
	m, clk := newTestMaster(t, cfg, map[string]uint64{"s1": 4 << 20})
	q := &countingQuotas{quotaMap: quotaMap{}}
	for i := range 100 {
		q.quotaMap[fmt.Sprintf("t%d", i)] = [2]uint64{1 << 20, 0}
	}
	m.SetTenantQuotas(q)
	for i := range 100 {
		mustPut(t, m, fmt.Sprintf("%sk", tenant.Namespace(fmt.Sprintf("t%d", i))), 1<<10, ReplicateConfig{})
	}
	m.Tick()
	q.n = 0
	for range 9 {
		clk.Advance(tenantScanEvery / 10)
		m.Tick()
	}
	if q.n != 0 {
		t.Fatalf("%d quota look-ups in 9 ticks within one scan period", q.n)
	}
	clk.Advance(tenantScanEvery)
	m.Tick()
	if q.n != 100 {
		t.Fatalf("a scan looked %d quotas up, want one per tenant (100)", q.n)
	}
}

// TestTenantWatermarkScanChunks: with more tenants than a Tick compares
// (tenantScanChunk), a cycle spans several Ticks, each looking up no more
// than a chunk of quotas, and still finds the tenant over its watermark.
func TestTenantWatermarkScanChunks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Durable = false
	cfg.LeaseTTL = 100 * time.Millisecond
	m, clk := newTestMaster(t, cfg, map[string]uint64{"s1": 16 << 20})
	q := &countingQuotas{quotaMap: quotaMap{"over": {64 << 10, 0}}}
	const idle = 3 * tenantScanChunk
	for i := range idle {
		q.quotaMap[fmt.Sprintf("t%d", i)] = [2]uint64{1 << 20, 0}
	}
	m.SetTenantQuotas(q)
	for i := range idle {
		mustPut(t, m, tenant.Namespace(fmt.Sprintf("t%d", i))+"k", 1<<10, ReplicateConfig{})
	}
	for i := range 64 { // all of its 64 KiB
		mustPut(t, m, fmt.Sprintf("%s%02d", tenant.Namespace("over"), i), 1<<10, ReplicateConfig{})
	}
	clk.Advance(2 * cfg.LeaseTTL)
	evicted := func() uint64 {
		for _, u := range m.TenantUsages() {
			if u.Tenant == "over" {
				return u.Evicted
			}
		}
		return 0
	}
	for tick := 1; evicted() == 0; tick++ {
		if tick > 5 {
			t.Fatalf("the tenant over its watermark not found in %d ticks", tick-1)
		}
		q.n = 0
		m.Tick()
		if q.n > tenantScanChunk {
			t.Fatalf("a tick looked %d quotas up, more than a chunk (%d)", q.n, tenantScanChunk)
		}
	}
}

// TestTenantHighWatermarkAtScale: in a pool of 300,000 objects (200,000
// of a tenant at its quota, 100,000 of another within its own), each Tick
// of the tenant watermark evicts at most evictSample objects, only the
// tenant's over its watermark, and the Ticks bring it down to its goal.
func TestTenantHighWatermarkAtScale(t *testing.T) {
	const big, other = 200_000, 100_000
	cfg := DefaultConfig()
	cfg.Durable = false
	cfg.ClientTTL = time.Hour
	cfg.LeaseTTL = 100 * time.Millisecond
	m, clk := newTestMaster(t, cfg, map[string]uint64{"s1": 1 << 30})
	m.SetTenantQuotas(quotaMap{"big": {big * 64, 0}, "other": {1 << 29, 0}})
	for i := range big {
		mustPut(t, m, fmt.Sprintf("%s%08x", tenant.Namespace("big"), uint32(i)*2654435761), 64, ReplicateConfig{})
	}
	for i := range other {
		mustPut(t, m, fmt.Sprintf("%s%07d", tenant.Namespace("other"), i), 64, ReplicateConfig{})
	}
	clk.Advance(2 * cfg.LeaseTTL)
	usage := func(name string) TenantUsage {
		for _, u := range m.TenantUsages() {
			if u.Tenant == name {
				return u
			}
		}
		return TenantUsage{}
	}
	goal := uint64(float64(big*64) * (cfg.TenantHighWatermark - cfg.EvictionRatio))
	for tick := 1; usage("big").Bytes > goal; tick++ {
		if tick > 40 {
			t.Fatalf("after %d ticks big holds %d bytes, goal %d", tick-1, usage("big").Bytes, goal)
		}
		before := usage("big").Evicted
		m.Tick()
		if n := usage("big").Evicted - before; n > evictSample {
			t.Fatalf("tick %d evicted %d objects, more than it may look at (%d)", tick, n, evictSample)
		}
		clk.Advance(10 * time.Millisecond)
	}
	if u := usage("other"); u.Objects != other || u.Evicted != 0 {
		t.Fatalf("the tenant within its quota: %+v", u)
	}
}
