package master

import (
	"errors"
	"testing"
	"time"
)

// upsertChain puts key n times through the client's slots with CommitNext
// (upserts of size bytes) and returns the address of each committed
// version and the client's slot after the last.
func upsertChain(t *testing.T, m *Master, client, key string, size uint64, n int) ([]uint64, string, []Replica) {
	t.Helper()
	ask := SlotAsk{Size: size, KeyLen: len(key)}
	slot, reps := reserve(t, m, client, size, key)
	var addrs []uint64
	for i := range n {
		c := m.CommitNext(client, key, slot, uint32(100+i), ReplicateConfig{}, true, ask)
		if c.Err != nil || c.Gone || c.ReserveErr != nil || c.Slot == "" {
			t.Fatalf("upsert %d: %+v", i, c)
		}
		addrs = append(addrs, reps[0].Addr)
		slot, reps = c.Slot, c.Next
	}
	return addrs, slot, reps
}

// An upsert's replaced version of the same size is the client's next slot:
// no tombstone, no new space, the key reads the new version.
func TestSlotReuseReplacedVersion(t *testing.T) {
	for _, durable := range []bool{true, false} {
		m, _ := newTestMaster(t, Config{Durable: durable}, map[string]uint64{"a": 1 << 20})
		addrs, _, next := upsertChain(t, m, "w", "k", 100, 4)
		// Put 1 takes the reserved slot, put 2 a fresh one (nothing replaced
		// yet), puts 3 and 4 the spaces of versions 1 and 2.
		if addrs[2] != addrs[0] || addrs[3] != addrs[1] || next[0].Addr != addrs[2] {
			t.Fatalf("durable=%v: versions at %x, next slot at %x: want versions 3 and 4 and the next slot in the replaced spaces", durable, addrs, next[0].Addr)
		}
		if next[0].Seq <= m.seq-1 && durable {
			t.Fatalf("reused slot seq %d not new (master at %d)", next[0].Seq, m.seq)
		}
		info, err := m.GetReplicaList("k")
		if err != nil || info.CRC != 103 || info.Replicas[0].Addr != addrs[3] {
			t.Fatalf("k = %+v, %v", info, err)
		}
		st := m.Stats()
		if st.SlotsReused != 3 || st.Objects != 1 || st.PutSlots != 1 || len(m.Tombstones()) != 0 {
			t.Fatalf("durable=%v: stats %+v, tombstones %v", durable, st, m.Tombstones())
		}
	}
}

// A leased version is not reused (its readers keep it), nor one of another
// size, nor one whose key's older header a slot already holds.
func TestSlotReuseRefusals(t *testing.T) {
	m, clk := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	addrs, slot, reps := upsertChain(t, m, "w", "k", 100, 1)
	if _, err := m.GetReplicaList("k"); err != nil { // a lease on version 1
		t.Fatal(err)
	}
	c := m.CommitNext("w", "k", slot, 7, ReplicateConfig{}, true, SlotAsk{Size: 100, KeyLen: 1})
	if c.Err != nil || c.Gone || c.Next[0].Addr == addrs[0] || m.Stats().SlotsReused != 0 {
		t.Fatalf("leased version reused: %+v", c)
	}
	clk.Advance(time.Hour) // the lease ends
	slot, reps = c.Slot, c.Next
	c = m.CommitNext("w", "k", slot, 8, ReplicateConfig{}, true, SlotAsk{Size: 200, KeyLen: 1})
	if c.Err != nil || c.Gone || c.Next[0].Addr == reps[0].Addr || m.Stats().SlotsReused != 0 {
		t.Fatalf("version of another size reused: %+v", c)
	}
	// Another client's upsert of k while w's slot holds k's older header:
	// the replaced version is freed the usual way.
	_, wslot, _ := upsertChain(t, m, "w", "j", 100, 2) // w's slot: j's version 1
	_ = wslot
	a, _ := reserve(t, m, "a", 100, "j")
	c = m.CommitNext("a", "j", a, 9, ReplicateConfig{}, true, SlotAsk{Size: 100, KeyLen: 1})
	if c.Err != nil || c.Gone || m.Stats().SlotsReused != 1 || len(m.Tombstones()) == 0 {
		t.Fatalf("second older header of j in a slot: %+v, reused %d", c, m.Stats().SlotsReused)
	}
}

// Removing a key whose older header lies in a reused slot names that
// header to the remover, and the slot's commit is refused: the remover's
// blind zeros may land on the client's header.
func TestSlotReuseRevokedByRemove(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	addrs, slot, reps := upsertChain(t, m, "w", "k", 100, 3) // the slot: k's version 2
	if reps[0].Addr != addrs[1] {
		t.Fatalf("slot at %x, want version 2's %x", reps[0].Addr, addrs[1])
	}
	tombs, err := m.RemoveHeaders("k", false)
	if err != nil {
		t.Fatal(err)
	}
	named := map[uint64]bool{}
	for _, h := range tombs {
		named[h.Addr] = true
	}
	if !named[addrs[2]-reps[0].HeaderLen] || !named[reps[0].Addr-reps[0].HeaderLen] {
		t.Fatalf("remove named %+v: want version 3's header and the slot's older one (%x)", tombs, reps[0].Addr-reps[0].HeaderLen)
	}
	c := m.CommitNext("w", "other", slot, 5, ReplicateConfig{}, true, SlotAsk{Size: 100, KeyLen: 5})
	if !c.Gone || c.Err != nil || len(c.Tombs) != 1 || c.Tombs[0].Addr != reps[0].Addr-reps[0].HeaderLen {
		t.Fatalf("commit of a revoked slot = %+v", c)
	}
	if ok, _ := m.Exist("other"); ok {
		t.Fatal("a revoked slot was committed")
	}
	// The slot's space is a fenced tombstone now; once the fence ends and
	// the node zeroed everything, every byte is free again.
	st := m.Stats()
	if st.PutSlots != 0 || st.Objects != 0 {
		t.Fatalf("stats %+v", st)
	}
	m.clock.(interface{ Advance(time.Duration) }).Advance(time.Minute)
	zeroAll(t, m, "client-a")
	if u := m.Stats().Used; u != 0 {
		t.Fatalf("%d bytes still used after zeroing", u)
	}
}

// A key evicted (or freed any way but a replacing commit) while a slot
// holds its older header revokes the slot: the node gets a held tombstone
// for that header (the bytes stay the slot's), and the slot's commit is
// refused.
func TestSlotReuseRevokedByEviction(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	_, slot, reps := upsertChain(t, m, "w", "k", 100, 3)
	m.mu.Lock()
	m.evicting = true
	m.freeLocked(m.objects.get("k"))
	m.evicting = false
	m.mu.Unlock()
	_, _, todo := m.Heartbeat("client-a", nil)
	held := false
	for _, h := range todo {
		held = held || h.Addr == reps[0].Addr-reps[0].HeaderLen
	}
	if !held {
		t.Fatalf("heartbeat %+v: no held tombstone of the slot's older header at %x", todo, reps[0].Addr)
	}
	used := m.Stats().Used
	m.Heartbeat("client-a", todo) // zeroed: the held one frees nothing
	if u := m.Stats().Used; u != used-64 {
		t.Fatalf("used %d after zeroing, want %d (k's version 3's header only)", u, used-64)
	}
	if c := m.CommitNext("w", "k2", slot, 5, ReplicateConfig{}, true, SlotAsk{Size: 100, KeyLen: 2}); !c.Gone {
		t.Fatalf("commit of a revoked slot = %+v", c)
	}
}

// A reused slot that ends uncommitted (its owner gone) leaves a tombstone
// filed under the older header's key too: removing that key names it.
func TestSlotReuseFreedSlotKeepsOlderKey(t *testing.T) {
	m, clk := newTestMaster(t, Config{Durable: true, ClientTTL: time.Second}, map[string]uint64{"a": 1 << 20})
	m.Heartbeat("w", nil)
	_, _, reps := upsertChain(t, m, "w", "k", 100, 3)
	for range 40 { // w is silent: dropped, its slot freed
		clk.Advance(time.Second)
		m.Heartbeat("client-a", nil)
		m.Tick()
	}
	if st := m.Stats(); st.PutSlots != 0 || st.Objects != 1 {
		t.Fatalf("stats %+v", st)
	}
	tombs, err := m.RemoveHeaders("k", false)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, h := range tombs {
		if h.Addr == reps[0].Addr-reps[0].HeaderLen {
			found = h.Seq >= reps[0].Seq // zeroes the slot's header and the older one under it
		}
	}
	if !found {
		t.Fatalf("remove named %+v, not the freed slot at %x (seq %d)", tombs, reps[0].Addr, reps[0].Seq)
	}
	if _, err := m.RemoveHeaders("k", false); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("second remove: %v", err)
	}
}

// zeroAll plays the node of client: zeroes every tombstone listed until
// none is left.
func zeroAll(t *testing.T, m *Master, client string) {
	t.Helper()
	for range 10 {
		_, _, todo := m.Heartbeat(client, nil)
		if len(todo) == 0 {
			return
		}
		m.Heartbeat(client, todo)
	}
	t.Fatal("tombstones left after 10 heartbeats")
}
