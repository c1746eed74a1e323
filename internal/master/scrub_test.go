package master

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/clock"
	"github.com/kvcache-go/mooncake/internal/objheader"
	"github.com/kvcache-go/mooncake/internal/tenant"
)

// TestScrubFreedExtents: under Scrub a removed object's extent is not free
// until its node reports it zeroed with its exact length; meanwhile another
// tenant's put needing it fails without evicting anything, the watermark
// does not count it, it is named for zeroing once it has aged scrubAge, and
// a repeated or wrong report frees nothing.
func TestScrubFreedExtents(t *testing.T) {
	m, clk := newTestMaster(t, Config{Scrub: true}, map[string]uint64{"s": 128 << 10})
	ka, kb, kc := tenant.Namespace("a")+"a", tenant.Namespace("a")+"b", tenant.Namespace("c")+"c"
	a := mustPut(t, m, ka, 64<<10, ReplicateConfig{Replicas: 1})
	mustPut(t, m, kb, 64<<10, ReplicateConfig{Replicas: 1})
	if todo := m.Scrub("client-s", nil); len(todo) != 0 {
		t.Fatalf("nothing freed yet, scrub asks for %v", todo)
	}
	pastPutGrants(m, clk) // see TestScrubGrantHold for younger objects
	if err := m.Remove(ka, false); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.Scrubbing != 64<<10 || st.Used != 64<<10 {
		t.Fatalf("after the remove: scrubbing %d used %d", st.Scrubbing, st.Used)
	}
	if _, err := m.PutStart("writer", kc, 64<<10, ReplicateConfig{Replicas: 1}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("tenant c's put over tenant a's dirty extent: %v, want ErrNoSpace", err)
	}
	if _, err := m.GetReplicaList(kb); err != nil {
		t.Fatalf("b was evicted to make room that was coming back: %v", err)
	}
	if todo := m.Scrub("client-s", nil); len(todo) != 0 {
		t.Fatalf("named before it aged: %v", todo)
	}
	clk.Advance(scrubAge)
	todo := m.Scrub("client-s", nil)
	off := a[0].Addr - (1 << 30)
	if len(todo) != 1 || todo[0] != (ScrubRef{Segment: "s", Offset: off, Length: 64 << 10}) {
		t.Fatalf("scrub asks for %v, want a's extent at %d", todo, off)
	}
	if again := m.Scrub("client-s", nil); len(again) != 1 {
		t.Fatalf("named again until reported: %v", again)
	}
	if _, err := m.PutStart("writer", tenant.Namespace("a")+"again", 64<<10, ReplicateConfig{Replicas: 1}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("the owner took an extent named for zeroing: %v", err)
	}
	for _, bad := range []ScrubRef{{"s", off, 4096}, {"s", off + 64, 64<<10 - 64}, {"other", off, 64 << 10}} {
		m.Scrub("client-s", []ScrubRef{bad})
		if m.DirtyBytes() != 64<<10 {
			t.Fatalf("report %v freed something", bad)
		}
	}
	if left := m.Scrub("nobody", todo); left != nil || m.DirtyBytes() != 64<<10 {
		t.Fatal("another client's report freed something")
	}
	if left := m.Scrub("client-s", todo); len(left) != 0 || m.DirtyBytes() != 0 {
		t.Fatalf("after the report: %v left, %d dirty", left, m.DirtyBytes())
	}
	m.Scrub("client-s", todo) // late repeat: frees nothing twice
	c := mustPut(t, m, kc, 64<<10, ReplicateConfig{Replicas: 1})
	if c[0].Addr != a[0].Addr {
		t.Fatalf("c at %#x, want a's zeroed extent %#x", c[0].Addr, a[0].Addr)
	}
	if st := m.Stats(); st.Used != 128<<10 || st.Scrubbing != 0 {
		t.Fatalf("used %d scrubbing %d", st.Used, st.Scrubbing)
	}
}

// TestScrubOwnerReuse: a tenant's put takes the tenant's own dirty extent
// of its size at once (a tenant replacing its own objects never waits),
// and that extent is then neither dirty nor named.
func TestScrubOwnerReuse(t *testing.T) {
	m, clk := newTestMaster(t, Config{Scrub: true}, map[string]uint64{"s": 128 << 10})
	ns := tenant.Namespace("a")
	a := mustPut(t, m, ns+"a", 64<<10, ReplicateConfig{Replicas: 1})
	mustPut(t, m, ns+"b", 64<<10, ReplicateConfig{Replicas: 1})
	if err := m.Remove(ns+"a", false); err != nil {
		t.Fatal(err)
	}
	c := mustPut(t, m, ns+"c", 64<<10, ReplicateConfig{Replicas: 1})
	if c[0].Addr != a[0].Addr || m.DirtyBytes() != 0 {
		t.Fatalf("owner's put at %#x (its freed extent %#x), %d dirty", c[0].Addr, a[0].Addr, m.DirtyBytes())
	}
	clk.Advance(scrubAge)
	if todo := m.Scrub("client-s", nil); len(todo) != 0 {
		t.Fatalf("a reused extent named for zeroing: %v", todo)
	}
	// A put slot takes no dirty space: its key comes later.
	if err := m.Remove(ns+"c", false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.PutReserve("writer", 64<<10, 8, ReplicateConfig{Replicas: 1}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a slot reserved over dirty space: %v", err)
	}
}

// TestScrubOff: without Scrub a freed extent is free at once and nothing
// is named.
func TestScrubOff(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, map[string]uint64{"s": 128 << 10})
	a := mustPut(t, m, "a", 64<<10, ReplicateConfig{Replicas: 1})
	if err := m.Remove("a", false); err != nil {
		t.Fatal(err)
	}
	clk.Advance(scrubAge)
	if todo := m.Scrub("client-s", nil); todo != nil || m.DirtyBytes() != 0 {
		t.Fatalf("scrub off: %v", todo)
	}
	if c := mustPut(t, m, tenant.Namespace("b")+"c", 64<<10, ReplicateConfig{Replicas: 1}); c[0].Addr != a[0].Addr {
		t.Fatal("freed extent not reused at once")
	}
}

// TestScrubAnswerBounded: an answer names at most maxScrubPerPing extents
// and, past the first, maxScrubBytesPerPing bytes; reports are taken back
// scrubPart at a time until everything is free again.
func TestScrubAnswerBounded(t *testing.T) {
	const n = maxScrubPerPing + 100
	m, clk := newTestMaster(t, Config{Scrub: true, Align: 64}, map[string]uint64{"s": n * 64})
	for i := range n {
		mustPut(t, m, fmt.Sprintf("k%d", i), 64, ReplicateConfig{Replicas: 1})
	}
	pastPutGrants(m, clk)
	for i := range n {
		if err := m.Remove(fmt.Sprintf("k%d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(scrubAge)
	todo := m.Scrub("client-s", nil)
	if len(todo) != maxScrubPerPing {
		t.Fatalf("answer of %d extents, want %d", len(todo), maxScrubPerPing)
	}
	rest := m.Scrub("client-s", todo)
	if len(rest) != 100 || m.DirtyBytes() != 100*64 {
		t.Fatalf("after the first report: %d named, %d dirty", len(rest), m.DirtyBytes())
	}
	if left := m.Scrub("client-s", rest); len(left) != 0 || m.DirtyBytes() != 0 {
		t.Fatalf("after the second: %d named, %d dirty", len(left), m.DirtyBytes())
	}
}

// TestScrubAtScale: 200,000 freed extents (of one tenant's removed
// objects, aged) drain through bounded answers: none names more than
// maxScrubPerPing, and after
// ceil(n / maxScrubPerPing) reports everything is free again.
func TestScrubAtScale(t *testing.T) {
	const n = 200_000
	m, clk := newTestMaster(t, Config{Scrub: true, Align: 64}, map[string]uint64{"s": n * 64})
	ns := tenant.Namespace("a")
	for i := range n {
		mustPut(t, m, fmt.Sprintf("%s%d", ns, i), 64, ReplicateConfig{Replicas: 1})
	}
	pastPutGrants(m, clk)
	for i := range n {
		if err := m.Remove(fmt.Sprintf("%s%d", ns, i), false); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(scrubAge)
	var todo []ScrubRef
	rounds := 0
	for todo = m.Scrub("client-s", nil); len(todo) > 0; todo = m.Scrub("client-s", todo) {
		if len(todo) > maxScrubPerPing {
			t.Fatalf("an answer of %d extents", len(todo))
		}
		if rounds++; rounds > n/maxScrubPerPing+2 {
			t.Fatalf("%d rounds and %d bytes still dirty", rounds, m.DirtyBytes())
		}
	}
	if d := m.DirtyBytes(); d != 0 || m.Stats().Used != 0 {
		t.Fatalf("after %d rounds: %d dirty, %d used", rounds, d, m.Stats().Used)
	}
}

// BenchmarkScrubAnswer: one Scrub call (a ping's: take back an answer's
// worth of reports, name the next) on a segment with 1,000,000 dirty
// extents: the master's lock is held for that long.
func BenchmarkScrubAnswer(b *testing.B) {
	const n = 1_000_000
	m, err := New(Config{Scrub: true, Align: 64}, newFakeClock())
	if err != nil {
		b.Fatal(err)
	}
	if err := m.MountSegment("client-s", SegmentSpec{Name: "s", Endpoint: "ep", Base: 1 << 30, Size: n * 64}); err != nil {
		b.Fatal(err)
	}
	m.mu.Lock()
	s := m.segOrder[0]
	if !s.alloc.AllocAt(0, n*64) {
		b.Fatal("alloc")
	}
	for i := range uint64(n) {
		m.releaseLocked(s, i*64, 64, noOwner, 0)
	}
	m.mu.Unlock()
	todo := m.Scrub("client-s", nil)
	b.ResetTimer()
	for b.Loop() {
		next := m.Scrub("client-s", todo)
		b.StopTimer()
		m.mu.Lock()
		for _, x := range todo { // dirty again: the same amount every call
			if s.alloc.AllocAt(x.Offset, x.Length) {
				m.releaseLocked(s, x.Offset, x.Length, noOwner, 0)
			}
		}
		m.mu.Unlock()
		todo = next
		b.StartTimer()
	}
}

// BenchmarkScrubName: a Scrub call that reports nothing, on a segment
// with 1,000,000 dirty extents whose wait ended (each call settles an
// answer's worth of them, settlePart per hold of the lock, and names
// them), and on one with 1,000,000 held and 4,096 ready: an answer costs
// what it names, not what waits.
func BenchmarkScrubName(b *testing.B) {
	for _, held := range []bool{false, true} {
		b.Run(fmt.Sprintf("held=%v", held), func(b *testing.B) {
			const n, ready = 1_000_000, maxScrubPerPing
			clk := newFakeClock()
			m, err := New(Config{Scrub: true, Align: 64}, clk)
			if err != nil {
				b.Fatal(err)
			}
			if err := m.MountSegment("client-s", SegmentSpec{Name: "s", Endpoint: "ep", Base: 1 << 30, Size: (n + ready) * 64}); err != nil {
				b.Fatal(err)
			}
			m.mu.Lock()
			s := m.segOrder[0]
			if !s.alloc.AllocAt(0, (n+ready)*64) {
				b.Fatal("alloc")
			}
			var hold nanotime
			if held {
				hold = nanoOf(clk.Now().Add(time.Hour))
			}
			for i := range uint64(n + ready) {
				if i < n {
					m.releaseLocked(s, i*64, 64, "a", hold)
				} else {
					m.releaseLocked(s, i*64, 64, noOwner, 0)
				}
			}
			m.mu.Unlock()
			clk.Advance(scrubAge)
			for b.Loop() {
				if todo := m.Scrub("client-s", nil); len(todo) != maxScrubPerPing {
					b.Fatalf("named %d", len(todo))
				}
			}
		})
	}
}

// TestScrubReleaseTwice: an extent released again while dirty (which no
// caller does) replaces its entry instead of counting twice or failing.
func TestScrubReleaseTwice(t *testing.T) {
	m, _ := newTestMaster(t, Config{Scrub: true}, map[string]uint64{"s": 128 << 10})
	m.mu.Lock()
	s := m.segOrder[0]
	if !s.alloc.AllocAt(0, 4096) {
		t.Fatal("alloc")
	}
	m.releaseLocked(s, 0, 4096, "a", 0)
	m.releaseLocked(s, 0, 4096, "b", 0)
	d, n := s.dirty[0], s.dirtyBytes
	m.mu.Unlock()
	if d.owner != "b" || n != 4096 {
		t.Fatalf("dirty %+v, %d bytes", d, n)
	}
	m.mu.Lock()
	checkDirty(t, s)
	m.mu.Unlock()
}

// pastPutGrants moves clk past the write grants of the puts made so far.
func pastPutGrants(m *Master, clk *clock.Fake) {
	clk.Advance(m.Config().PutTimeout + grantClockSlack)
}

// TestScrubGrantHold: an object freed while its put's write grant may
// still be honoured (younger than PutTimeout, plus the clock slack) leaves
// an extent that no other tenant gets before that grant ends: it is not
// named for zeroing (so not freed), and another tenant's put needing the
// room evicts instead of waiting for it. Its owner may take it back at
// once. A replica cleared or moved away, and a freed durable object's
// header, are held the same way.
func TestScrubGrantHold(t *testing.T) {
	m, clk := newTestMaster(t, Config{Scrub: true}, map[string]uint64{"s": 128 << 10})
	na, nb := tenant.Namespace("a"), tenant.Namespace("b")
	old := mustPut(t, m, na+"old", 64<<10, ReplicateConfig{Replicas: 1})
	pastPutGrants(m, clk)
	a := mustPut(t, m, na+"a", 64<<10, ReplicateConfig{Replicas: 1})
	clk.Advance(m.Config().PutTimeout / 2)
	if err := m.Remove(na+"a", false); err != nil {
		t.Fatal(err)
	}
	clk.Advance(scrubAge)
	if todo := m.Scrub("client-s", nil); len(todo) != 0 {
		t.Fatalf("named while a's put grant lives: %v", todo)
	}
	if st := m.Stats(); st.ScrubHeld != 64<<10 || st.Scrubbing != 64<<10 {
		t.Fatalf("held %d scrubbing %d, want a's extent in both", st.ScrubHeld, st.Scrubbing)
	}
	// A report of the held extent (never named) frees nothing.
	m.Scrub("client-s", []ScrubRef{{Segment: "s", Offset: a[0].Addr - (1 << 30), Length: 64 << 10}})
	if st := m.Stats(); st.ScrubHeld != 64<<10 {
		t.Fatalf("a report cut the hold short: held %d", st.ScrubHeld)
	}
	// b's put needs the room: the held extent is no reason to wait, so it
	// evicts a's old object, whose extent (dirty, no grant on it) is zeroed
	// and then taken.
	if _, err := m.PutStart("writer", nb+"b", 64<<10, ReplicateConfig{Replicas: 1}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("b's put over dirty space: %v, want ErrNoSpace", err)
	}
	if _, err := m.GetReplicaList(na + "old"); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("a's old object not evicted for b's put: %v", err)
	}
	clk.Advance(scrubAge)
	todo := m.Scrub("client-s", nil)
	if len(todo) != 1 || todo[0].Offset != old[0].Addr-(1<<30) {
		t.Fatalf("scrub asks for %v, want only the evicted object's extent", todo)
	}
	m.Scrub("client-s", todo)
	if b := mustPut(t, m, nb+"b", 64<<10, ReplicateConfig{Replicas: 1}); b[0].Addr != old[0].Addr {
		t.Fatalf("b at %#x, want the evicted object's zeroed extent %#x", b[0].Addr, old[0].Addr)
	}
	m.mu.Lock()
	checkDirty(t, m.segOrder[0])
	m.mu.Unlock()
	// The hold ends: named, zeroed, free.
	clk.Advance(m.Config().PutTimeout/2 + grantClockSlack)
	if st := m.Stats(); st.ScrubHeld != 0 || st.Scrubbing != 64<<10 {
		t.Fatalf("after the hold: held %d scrubbing %d", st.ScrubHeld, st.Scrubbing)
	}
	todo = m.Scrub("client-s", nil)
	if len(todo) != 1 || todo[0].Offset != a[0].Addr-(1<<30) {
		t.Fatalf("after the hold: %v, want a's extent", todo)
	}
	m.Scrub("client-s", todo)
	if st := m.Stats(); st.Scrubbing != 0 || st.Used != 64<<10 {
		t.Fatalf("scrubbing %d used %d after the report", st.Scrubbing, st.Used)
	}
}

// TestScrubGrantHoldOwner: the owner of a held extent takes it back at
// once (its own bytes, its own grant).
func TestScrubGrantHoldOwner(t *testing.T) {
	m, _ := newTestMaster(t, Config{Scrub: true}, map[string]uint64{"s": 64 << 10})
	na := tenant.Namespace("a")
	a := mustPut(t, m, na+"a", 64<<10, ReplicateConfig{Replicas: 1})
	if err := m.Remove(na+"a", false); err != nil {
		t.Fatal(err)
	}
	if c := mustPut(t, m, na+"c", 64<<10, ReplicateConfig{Replicas: 1}); c[0].Addr != a[0].Addr {
		t.Fatal("the owner did not take its held extent back")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.segOrder[0]
	checkDirty(t, s)
	if s.heldBytes != 0 || s.dirtyBytes != 0 {
		t.Fatalf("held %d dirty %d after the owner took it", s.heldBytes, s.dirtyBytes)
	}
}

// TestScrubGrantHoldDurable: a freed durable object's header, once its
// node zeroed the tombstone, is held like the rest of the object while the
// put's write grant (which covers it) lives, then named and freed.
func TestScrubGrantHoldDurable(t *testing.T) {
	m, clk := newTestMaster(t, Config{Scrub: true, Durable: true}, map[string]uint64{"s": 128 << 10})
	na := tenant.Namespace("a")
	mustPut(t, m, na+"a", 64<<10, ReplicateConfig{Replicas: 1})
	if err := m.Remove(na+"a", false); err != nil {
		t.Fatal(err)
	}
	_, _, tombs := m.Heartbeat("client-s", nil)
	if len(tombs) != 1 {
		t.Fatalf("tombstones %v, want the removed header", tombs)
	}
	clk.Advance(objheader.ZeroFence)
	m.Heartbeat("client-s", tombs)
	clk.Advance(scrubAge)
	if todo := m.Scrub("client-s", nil); len(todo) != 0 {
		t.Fatalf("named while the put's grant lives: %v", todo)
	}
	if st := m.Stats(); st.Used != 0 || st.Scrubbing == 0 {
		t.Fatalf("used %d scrubbing %d: the header and value should be dirty, held", st.Used, st.Scrubbing)
	}
	m.mu.Lock()
	checkDirty(t, m.segOrder[0])
	m.mu.Unlock()
	pastPutGrants(m, clk)
	todo := m.Scrub("client-s", nil)
	var n uint64
	for _, x := range todo {
		n += x.Length
	}
	if n != m.DirtyBytes() || len(todo) != 2 {
		t.Fatalf("after the hold: %v (%d bytes of %d dirty), want header and value", todo, n, m.DirtyBytes())
	}
	m.Scrub("client-s", todo)
	if st := m.Stats(); st.Scrubbing != 0 || st.Used != 0 {
		t.Fatalf("scrubbing %d used %d after the report", st.Scrubbing, st.Used)
	}
}

// TestScrubGrantHoldLease: an object removed by force under a read lease
// (whose READ grants live to the lease's end) leaves an extent held until
// the lease ends.
func TestScrubGrantHoldLease(t *testing.T) {
	m, clk := newTestMaster(t, Config{Scrub: true, LeaseTTL: time.Minute}, map[string]uint64{"s": 128 << 10})
	na := tenant.Namespace("a")
	mustPut(t, m, na+"a", 64<<10, ReplicateConfig{Replicas: 1})
	pastPutGrants(m, clk)
	if _, err := m.GetReplicaList(na + "a"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(na+"a", true); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute - time.Second)
	if todo := m.Scrub("client-s", nil); len(todo) != 0 {
		t.Fatalf("named while the lease's READ grant lives: %v", todo)
	}
	clk.Advance(time.Second + grantClockSlack)
	if todo := m.Scrub("client-s", nil); len(todo) != 1 {
		t.Fatalf("after the lease: %v, want the extent", todo)
	}
}

// TestScrubRemountHold: a remounted segment's memory (whose objects, and
// the grants signed on them, this master does not know) is held from
// every put until a grant signed before the remount has expired, then
// named for zeroing; a fresh mount's is free at once.
func TestScrubRemountHold(t *testing.T) {
	m, clk := newTestMaster(t, Config{Scrub: true, LeaseTTL: 40 * time.Second}, nil)
	spec := SegmentSpec{Name: "r", Endpoint: "ep-r", Base: 1 << 30, Size: 128 << 10}
	if _, err := m.RestoreBeginFresh("client-r", []SegmentSpec{spec}, false); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.ScrubHeld != 128<<10 {
		t.Fatalf("held %d, want the remounted segment", st.ScrubHeld)
	}
	if _, err := m.PutStart("writer", tenant.Namespace("a")+"a", 4096, ReplicateConfig{Replicas: 1}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a put over held memory: %v, want ErrNoSpace", err)
	}
	clk.Advance(40 * time.Second) // the lease outlasts PutTimeout here
	if todo := m.Scrub("client-r", nil); len(todo) != 0 {
		t.Fatalf("named while a grant signed before the remount may live: %v", todo)
	}
	clk.Advance(grantClockSlack)
	todo := m.Scrub("client-r", nil)
	if len(todo) != 1 || todo[0].Length != 128<<10 {
		t.Fatalf("after the hold: %v, want the whole segment", todo)
	}
	m.Scrub("client-r", todo)
	mustPut(t, m, tenant.Namespace("a")+"a", 4096, ReplicateConfig{Replicas: 1})

	spec2 := SegmentSpec{Name: "f", Endpoint: "ep-f", Base: 1 << 40, Size: 128 << 10}
	if _, err := m.RestoreBeginFresh("client-f", []SegmentSpec{spec2}, true); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.Scrubbing != 0 {
		t.Fatalf("a fresh mount is dirty: %d", st.Scrubbing)
	}
}

// TestScrubHeldCharged: what a tenant's freed objects leave held counts
// against its bytes quota (a tenant churning young objects cannot keep
// more of the pool from the others than its quota), shows in its usage,
// and stops counting when the hold ends or the tenant takes it back; a
// quota reload keeps it.
func TestScrubHeldCharged(t *testing.T) {
	m, clk := newTestMaster(t, Config{Scrub: true}, map[string]uint64{"s": 512 << 10})
	m.SetTenantQuotas(quotaMap{"a": {128 << 10, 0}, "b": {0, 0}})
	na := tenant.Namespace("a")
	mustPut(t, m, na+"x", 64<<10, ReplicateConfig{Replicas: 1})
	if err := m.Remove(na+"x", false); err != nil {
		t.Fatal(err)
	}
	held := func() uint64 {
		for _, u := range m.TenantUsages() {
			if u.Tenant == "a" {
				return u.Held
			}
		}
		return 0
	}
	if h := held(); h != 64<<10 {
		t.Fatalf("a holds %d, want its removed object's extent", h)
	}
	if _, err := m.PutStart("w", na+"big", 96<<10, ReplicateConfig{Replicas: 1}); !errors.Is(err, ErrTenantQuotaExceeded) {
		t.Fatalf("a's put past its quota with what it holds: %v, want ErrTenantQuotaExceeded", err)
	}
	m.SetTenantQuotas(quotaMap{"a": {128 << 10, 0}, "b": {0, 0}})
	if h := held(); h != 64<<10 {
		t.Fatalf("after a quota reload a holds %d", h)
	}
	pastPutGrants(m, clk)
	mustPut(t, m, na+"big", 96<<10, ReplicateConfig{Replicas: 1}) // the hold ended: admitted
	if h := held(); h != 0 {
		t.Fatalf("after the hold a holds %d", h)
	}
	// Taken back by its owner: no longer held.
	mustPut(t, m, na+"y", 16<<10, ReplicateConfig{Replicas: 1})
	if err := m.Remove(na+"y", false); err != nil {
		t.Fatal(err)
	}
	if h := held(); h != 16<<10 {
		t.Fatalf("a holds %d, want y's extent", h)
	}
	mustPut(t, m, na+"z", 16<<10, ReplicateConfig{Replicas: 1})
	if h := held(); h != 0 {
		t.Fatalf("a holds %d after taking its extent back", h)
	}
	m.mu.Lock()
	checkDirty(t, m.segOrder[0])
	checkTenantHeld(t, m)
	m.mu.Unlock()
}

// TestScrubReadyAmongHeld: an answer names the extents ready for zeroing
// at once however many others are held (it does not look through them):
// 1,000 ready among 200,000 held all go in the first answer.
func TestScrubReadyAmongHeld(t *testing.T) {
	const held, ready = 200_000, 1_000
	m, clk := newTestMaster(t, Config{Scrub: true, Align: 64}, map[string]uint64{"s": (held + ready) * 64})
	m.mu.Lock()
	s := m.segOrder[0]
	if !s.alloc.AllocAt(0, (held+ready)*64) {
		t.Fatal("alloc")
	}
	hold := nanoOf(clk.Now().Add(time.Minute))
	for i := range uint64(held) {
		m.releaseLocked(s, i*64, 64, "a", hold)
	}
	for i := range uint64(ready) {
		m.releaseLocked(s, (held+i)*64, 64, noOwner, 0)
	}
	checkDirty(t, s)
	m.mu.Unlock()
	todo := m.Scrub("client-s", nil)
	if len(todo) != ready {
		t.Fatalf("first answer names %d, want the %d ready", len(todo), ready)
	}
	for _, x := range todo {
		if x.Offset < held*64 {
			t.Fatalf("a held extent named: %v", x)
		}
	}
	if left := m.Scrub("client-s", todo); len(left) != 0 {
		t.Fatalf("after the report: %d named", len(left))
	}
	clk.Advance(time.Minute)
	if todo = m.Scrub("client-s", nil); len(todo) != maxScrubPerPing {
		t.Fatalf("after the holds: %d named, want a full answer", len(todo))
	}
	m.mu.Lock()
	checkDirty(t, s)
	m.mu.Unlock()
}

// TestScrubWaitsBounded: a tenant replacing its own objects takes every
// freed extent back at once, leaving its queue or heap entry stale; with
// no ping settling anything, the frees themselves drop those entries, so
// the queue holds about a scrubAge's worth of frees and the heap a hold's
// worth, not every free there was.
func TestScrubWaitsBounded(t *testing.T) {
	const n, rounds = 256, 20_000
	m, clk := newTestMaster(t, Config{Scrub: true, Align: 64, PutTimeout: 10 * time.Millisecond}, map[string]uint64{"s": n * 4096})
	ns := tenant.Namespace("a")
	for i := range n - 1 {
		mustPut(t, m, fmt.Sprint(ns, i), 4096, ReplicateConfig{Replicas: 1})
	}
	// Another tenant's freed extent, never reported: the dirty set is never
	// empty (which would drop every entry at once).
	mustPut(t, m, tenant.Namespace("b")+"b", 4096, ReplicateConfig{Replicas: 1})
	if err := m.Remove(tenant.Namespace("b")+"b", false); err != nil {
		t.Fatal(err)
	}
	for i := range rounds {
		if i == rounds/2 {
			pastPutGrants(m, clk) // from here on some freed objects are past their grants: queued, not held
		}
		k := fmt.Sprint(ns, i%(n-1))
		if err := m.Remove(k, false); err != nil {
			t.Fatal(err)
		}
		mustPut(t, m, k, 4096, ReplicateConfig{Replicas: 1}) // takes the freed extent back
		clk.Advance(time.Millisecond)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.segOrder[0]
	checkDirty(t, s)
	queued, held := len(s.aging)-s.agingHead, len(s.held)
	t.Logf("queue %d, heap %d entries after %d frees", queued, held, rounds)
	// a hold is PutTimeout + grantClockSlack (1.01 s: 1,010 frees here),
	// the aging scrubAge (50 frees)
	if queued > 200 || held > 2_500 {
		t.Fatalf("queue %d, heap %d entries: stale entries pile up", queued, held)
	}
}

// TestScrubHeldUnmount: what a tenant held on a segment stops counting
// against its quota when the segment is unmounted.
func TestScrubHeldUnmount(t *testing.T) {
	m, _ := newTestMaster(t, Config{Scrub: true}, map[string]uint64{"s": 256 << 10})
	m.SetTenantQuotas(quotaMap{"a": {128 << 10, 0}})
	na := tenant.Namespace("a")
	mustPut(t, m, na+"x", 64<<10, ReplicateConfig{Replicas: 1})
	if err := m.Remove(na+"x", false); err != nil {
		t.Fatal(err)
	}
	if u := m.TenantUsages(); len(u) != 1 || u[0].Held != 64<<10 {
		t.Fatalf("usages %+v, want a holding its removed object", u)
	}
	if err := m.UnmountSegment("client-s", "s"); err != nil {
		t.Fatal(err)
	}
	if u := m.TenantUsages(); len(u) != 0 {
		t.Fatalf("usages %+v after the unmount, want none", u)
	}
	m.mu.Lock()
	checkTenantHeld(t, m)
	m.mu.Unlock()
}
