package master

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// CommitNext commits a slot and reserves the next one in one call: the key
// is visible with the slot's space, and the next slot is a new unfinished
// put of the client, sized as asked.
func TestCommitNextSlot(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	slot, reps := reserve(t, m, "w", 100, "key1")
	c := m.CommitNext("w", "key1", slot, 7, ReplicateConfig{}, false, SlotAsk{Size: 100, KeyLen: 4})
	if c.Err != nil || c.Gone || len(c.Tombs) != 0 || c.ReserveErr != nil {
		t.Fatalf("CommitNext = %+v", c)
	}
	info, err := m.GetReplicaList("key1")
	if err != nil || info.CRC != 7 || info.Replicas[0].Addr != reps[0].Addr {
		t.Fatalf("committed object %+v, %v", info, err)
	}
	if !strings.HasPrefix(c.Slot, SlotPrefix) || len(c.Next) != 1 || c.Next[0].Seq <= reps[0].Seq || c.Next[0].Addr == reps[0].Addr {
		t.Fatalf("next slot %q %+v after %+v", c.Slot, c.Next, reps)
	}
	if st := m.Stats(); st.PutSlots != 1 || st.Objects != 1 {
		t.Fatalf("stats %+v: want the committed key and one slot", st)
	}
	// The next slot takes the next put, and asking for nothing reserves nothing.
	c = m.CommitNext("w", "key2", c.Slot, 8, ReplicateConfig{}, false, SlotAsk{})
	if c.Err != nil || c.Gone || c.Slot != "" || c.Next != nil {
		t.Fatalf("second CommitNext = %+v", c)
	}
	if st := m.Stats(); st.PutSlots != 0 || st.Objects != 2 {
		t.Fatalf("stats %+v: want two keys, no slot", st)
	}
}

// A commit that does not go through reserves no slot: the key's refusal
// (its tombstones returned), a slot gone, an unknown put.
func TestCommitNextRefusedReservesNothing(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	mustPut(t, m, "k", 100, ReplicateConfig{})
	ask := SlotAsk{Size: 100, KeyLen: 1}
	slot, _ := reserve(t, m, "w", 100, "k")
	c := m.CommitNext("w", "k", slot, 7, ReplicateConfig{}, false, ask)
	if !errors.Is(c.Err, ErrObjectExists) || c.Gone || len(c.Tombs) != 1 || c.Slot != "" || c.Next != nil {
		t.Fatalf("refused CommitNext = %+v", c)
	}
	c = m.CommitNext("w", "k", SlotPrefix+"w/999", 7, ReplicateConfig{}, true, ask)
	if !c.Gone || c.Err != nil || c.Slot != "" {
		t.Fatalf("CommitNext of an unknown slot = %+v", c)
	}
	c = m.CommitNext("w", "nothing", "", 7, ReplicateConfig{}, false, ask)
	if !errors.Is(c.Err, ErrObjectNotFound) || c.Slot != "" {
		t.Fatalf("CommitNext of no put = %+v", c)
	}
	if st := m.Stats(); st.PutSlots != 0 || st.IncompleteObjects != 0 || st.Objects != 1 {
		t.Fatalf("stats %+v: refused commits left something", st)
	}
	// A bad ask is refused on its own: the commit still goes through.
	if _, err := m.PutStart("w", "k2", 100, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	c = m.CommitNext("w", "k2", "", 7, ReplicateConfig{}, false, SlotAsk{Size: 100, KeyLen: m.cfg.MaxKeyLen + 1})
	if c.Err != nil || !errors.Is(c.ReserveErr, ErrInvalidParams) || c.Slot != "" {
		t.Fatalf("CommitNext with a bad ask = %+v", c)
	}
	if ok, _ := m.Exist("k2"); !ok {
		t.Fatal("the commit with a bad ask did not go through")
	}
}

// The usual put (PutStart, write, commit without a slot) also gets a slot
// for the next one.
func TestCommitNextPutEnd(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	if _, err := m.PutStart("w", "k", 100, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	c := m.CommitNext("w", "k", "", 9, ReplicateConfig{}, false, SlotAsk{Size: 100, KeyLen: 1})
	if c.Err != nil || c.Gone || c.Slot == "" || len(c.Next) != 1 {
		t.Fatalf("CommitNext = %+v", c)
	}
	if info, err := m.GetReplicaList("k"); err != nil || info.CRC != 9 {
		t.Fatalf("committed %+v, %v", info, err)
	}
	// The slot is freed with its owner, as any unfinished put.
	if err := m.PutRevoke("w", c.Slot); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.PutSlots != 0 || st.IncompleteObjects != 0 {
		t.Fatalf("stats %+v after revoking the slot", st)
	}
}

// A heartbeat reporting more zeroed tombstones than one hold of the lock
// takes (heartbeatPart) frees all of them, and puts go on between parts.
func TestHeartbeatManyZeroed(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 64 << 20})
	n := 3*heartbeatPart + 7
	for i := range n { // an upsert to a new size frees the old version: a tombstone
		k := fmt.Sprintf("k%05d", i)
		mustPut(t, m, k, 4096, ReplicateConfig{})
		if _, err := m.Upsert("writer", k, 4096+64, ReplicateConfig{}); err != nil {
			t.Fatal(err)
		}
		if err := m.PutEnd("writer", k, 1); err != nil {
			t.Fatal(err)
		}
	}
	used0 := m.Stats().Used - uint64(n)*m.cfg.Align
	_, st, todo := m.Heartbeat("client-a", nil)
	if st != PingOK || len(todo) != n {
		t.Fatalf("heartbeat: %v, %d tombstones to zero, want %d", st, len(todo), n)
	}
	if used := m.Stats().Used; used != used0+uint64(n)*m.cfg.Align {
		t.Fatalf("used %d with %d tombstones, want %d", used, n, used0+uint64(n)*m.cfg.Align)
	}
	_, st, todo = m.Heartbeat("client-a", todo)
	if st != PingOK || len(todo) != 0 {
		t.Fatalf("heartbeat after zeroing: %v, %d left", st, len(todo))
	}
	if used := m.Stats().Used; used != used0 {
		t.Fatalf("used %d after every tombstone was zeroed, want %d", used, used0)
	}
	if len(m.tombIdx) != 0 {
		t.Fatalf("%d keys still indexed with tombstones", len(m.tombIdx))
	}
}

// A client dropped while its heartbeat waits is told to remount, and its
// reported tombstones are not taken back on segments it no longer owns.
func TestHeartbeatDroppedClient(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 1 << 20})
	if _, st, _ := m.Heartbeat("nobody", make([]HeaderRef, 2*heartbeatPart)); st != PingNeedRemount {
		t.Fatalf("heartbeat of an unknown client: %v", st)
	}
}
