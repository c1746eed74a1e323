package master

import (
	"fmt"
	"testing"
	"time"
)

// TestRemovePaged: a bulk removal goes chunk by chunk, each bounded in the
// objects it removes and carrying the tombstones of exactly those keys, with
// a cursor to go on from; leased keys are skipped unless forced; a pattern
// anchored on a literal prefix removes only keys with it.
func TestRemovePaged(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true, ClientTTL: time.Hour}, map[string]uint64{"a": 64 << 20})
	n := 2*RemoveChunk + 100
	for i := range n {
		mustPut(t, m, fmt.Sprintf("obj/%06d", i), 64, ReplicateConfig{})
	}
	for i := range 10 {
		mustPut(t, m, fmt.Sprintf("other/%d", i), 64, ReplicateConfig{})
	}
	if _, err := m.GetReplicaList("obj/000007"); err != nil { // leased
		t.Fatal(err)
	}
	mt, err := RegexMatcher(`^obj/\d+$`)
	if err != nil || mt.Prefix != "obj/" {
		t.Fatalf("matcher %+v %v", mt.Prefix, err)
	}
	removed, pages, after := 0, 0, ""
	for {
		p := m.RemovePageFrom(mt, false, after, 0)
		pages++
		if p.Removed > RemoveChunk || len(p.Tombstones) != p.Removed {
			t.Fatalf("page %d: %d removed, %d tombstones", pages, p.Removed, len(p.Tombstones))
		}
		removed += p.Removed
		if p.Next == "" {
			break
		}
		if p.Next <= after {
			t.Fatalf("cursor went back: %q after %q", p.Next, after)
		}
		after = p.Next
	}
	if removed != n-1 || pages != 3 {
		t.Fatalf("removed %d in %d pages, want %d in 3", removed, pages, n-1)
	}
	if ok, _ := m.Exist("obj/000007"); !ok {
		t.Fatal("a leased key was removed without force")
	}
	if keys, _ := m.List("", "", 100); len(keys) != 11 {
		t.Fatalf("%d keys left, want the leased one and other/*", len(keys))
	}
	if got := m.RemoveAll(true); got != 11 {
		t.Fatalf("forced remove-all removed %d", got)
	}
	if st := m.Summary(); st.Keys != 0 || st.Replicas != 0 || st.Leased != 0 {
		t.Fatalf("summary after remove-all %+v", st)
	}
}

// TestRemovePagedSmallLimit: the limit bounds a chunk; pages never repeat
// or skip a key.
func TestRemovePagedSmallLimit(t *testing.T) {
	m, _ := newTestMaster(t, Config{ClientTTL: time.Hour}, map[string]uint64{"a": 1 << 20})
	for i := range 25 {
		mustPut(t, m, fmt.Sprintf("k%02d", i), 64, ReplicateConfig{})
	}
	total, after := 0, ""
	for {
		p := m.RemovePageFrom(AllMatcher, false, after, 10)
		if p.Removed > 10 {
			t.Fatalf("page of %d past the limit", p.Removed)
		}
		total += p.Removed
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if total != 25 {
		t.Fatalf("removed %d of 25", total)
	}
}

// TestPingNeverWaitsForTheLock: a client's ping is answered and recorded
// while the core's lock is held by other work.
func TestPingNeverWaitsForTheLock(t *testing.T) {
	m, clk := newTestMaster(t, Config{ClientTTL: time.Second}, map[string]uint64{"a": 1 << 20})
	m.mu.Lock() // bulk work holding the lock
	clk.Advance(900 * time.Millisecond)
	done := make(chan PingStatus)
	go func() {
		_, st := m.Ping("client-a")
		done <- st
	}()
	var st PingStatus
	select {
	case st = <-done:
	case <-time.After(10 * time.Second):
		m.mu.Unlock()
		t.Fatal("Ping waited for the core's lock")
	}
	m.mu.Unlock()
	if st != PingOK {
		t.Fatalf("ping: %v", st)
	}
	clk.Advance(900 * time.Millisecond) // 1.8 s since mount, 0.9 s since the ping
	m.Tick()
	if st := m.Stats(); st.Segments != 1 || st.ClientsDropped != 0 {
		t.Fatalf("client dropped although it pinged: %+v", st)
	}
}

// TestMapsShrinkAfterMassRemoval: after most objects are removed the
// object map is rebuilt at the size left.
func TestMapsShrinkAfterMassRemoval(t *testing.T) {
	m, _ := newTestMaster(t, Config{ClientTTL: time.Hour}, map[string]uint64{"a": 64 << 20})
	for i := range 2 * shrinkMin {
		mustPut(t, m, fmt.Sprintf("k%06d", i), 64, ReplicateConfig{})
	}
	for i := range 10 {
		mustPut(t, m, fmt.Sprintf("z%d", i), 64, ReplicateConfig{})
	}
	m.mu.Lock()
	before := len(m.objects.slots)
	m.mu.Unlock()
	if n, err := m.RemoveByRegex(`^k`, false); err != nil || n != 2*shrinkMin {
		t.Fatalf("removed %d: %v", n, err)
	}
	m.mu.Lock()
	after, left := len(m.objects.slots), m.objects.len()
	m.mu.Unlock()
	if left != 10 || after >= before/8 {
		t.Fatalf("hash index of %d objects not rebuilt after the removal: %d slots, %d before", left, after, before)
	}
}

// TestListPagesAcrossHolds: a page larger than one hold of the lock is
// whole and in order, and the last page ends the listing.
func TestListPagesAcrossHolds(t *testing.T) {
	m, _ := newTestMaster(t, Config{ClientTTL: time.Hour}, map[string]uint64{"a": 64 << 20})
	n := 3*listHold + 7
	for i := range n {
		mustPut(t, m, fmt.Sprintf("k%06d", i), 64, ReplicateConfig{})
	}
	mustPut(t, m, "z", 64, ReplicateConfig{})
	page, next := m.List("k", "", 2*listHold+1)
	if len(page) != 2*listHold+1 || next != page[len(page)-1].Key || page[0].Key != "k000000" {
		t.Fatalf("first page: %d keys, next %q", len(page), next)
	}
	for i := 1; i < len(page); i++ {
		if page[i-1].Key >= page[i].Key {
			t.Fatalf("out of order at %d: %s %s", i, page[i-1].Key, page[i].Key)
		}
	}
	rest, next := m.List("k", next, 10*listHold)
	if len(rest) != n-len(page) || next != "" {
		t.Fatalf("second page: %d keys, next %q; want %d and the end", len(rest), next, n-len(page))
	}
}

// TestRemovePageBoundsTombstones: keys that carry many unzeroed tombstones
// (freed often while their node lagged behind) end a chunk early, so its
// answer stays bounded, and the next chunk goes on from there.
func TestRemovePageBoundsTombstones(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true, ClientTTL: time.Hour}, map[string]uint64{"a": 256 << 20})
	const perKey = 3000
	for _, k := range []string{"hot/a", "hot/b", "hot/c", "hot/d", "hot/e", "hot/f", "hot/g"} {
		for i := range perKey { // each upsert (a new size) frees the last version: one more tombstone
			if _, err := m.Upsert("w", k, uint64(64+64*(i%2)), ReplicateConfig{}); err != nil {
				t.Fatal(err)
			}
			if err := m.PutEnd("w", k, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	removed, pages, after := 0, 0, ""
	for {
		p := m.RemovePageFrom(AllMatcher, true, after, 0)
		pages++
		if len(p.Tombstones) > MaxPageTombstones+perKey {
			t.Fatalf("page %d carries %d tombstones", pages, len(p.Tombstones))
		}
		removed += p.Removed
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if removed != 7 || pages < 2 {
		t.Fatalf("removed %d keys in %d pages; want 7 in several", removed, pages)
	}
}

// TestLeave: a client without segments that leaves is forgotten at once and
// never counted as dropped; one with a mounted segment stays until it is
// unmounted.
func TestLeave(t *testing.T) {
	m, clk := newTestMaster(t, Config{ClientTTL: time.Second}, map[string]uint64{"a": 1 << 20})
	if _, err := m.Restore("pure", nil, nil); err != nil { // a client without segments registers
		t.Fatal(err)
	}
	if st := m.Stats(); st.Clients != 2 {
		t.Fatalf("%d clients, want the node and the pure client", st.Clients)
	}
	if !m.Leave("pure") || m.Leave("client-a") {
		t.Fatal("Leave: the pure client should go, the node with a segment stay")
	}
	if _, st := m.Ping("pure"); st != PingNeedRemount {
		t.Fatal("a client that left is still known")
	}
	if err := m.UnmountSegment("client-a", "a"); err != nil {
		t.Fatal(err)
	}
	if !m.Leave("client-a") {
		t.Fatal("the node without its segment did not leave")
	}
	clk.Advance(2 * time.Second)
	m.Tick()
	if st := m.Stats(); st.Clients != 0 || st.ClientsDropped != 0 {
		t.Fatalf("after leaving and the TTL: %+v", st)
	}
}
