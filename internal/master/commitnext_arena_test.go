package master

import (
	"fmt"
	"strings"
	"testing"
)

// keyHashBytes hashes a key's bytes as keyHash hashes the key.
func TestKeyHashBytes(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 16, 31, 32, 63, 64, 65, 200, 4096} {
		k := strings.Repeat("k", n)
		if keyHashBytes([]byte(k)) != keyHash(k) {
			t.Fatalf("key of %d bytes: keyHashBytes %x, keyHash %x", n, keyHashBytes([]byte(k)), keyHash(k))
		}
	}
}

// handKey: s takes o's key and o a new one, over s's old key's bytes when
// it fits and in new arena bytes when not; the index finds each by its key
// and the arena's counts follow.
func TestHandKey(t *testing.T) {
	tb := newObjTable()
	o := tb.add("key", object{})
	s := tb.add("slot-one", object{})
	tb.handKey(o, s, keyHash("key"), keyHash("slot-one"), "slot-two", keyHash("slot-two"))
	if tb.get("key") != s || tb.get("slot-two") != o || tb.get("slot-one") != nil || tb.n != 2 {
		t.Fatalf("after a hand-over: key -> %v, slot-two -> %v, slot-one -> %v", tb.get("key"), tb.get("slot-two"), tb.get("slot-one"))
	}
	if tb.key(s) != "key" || tb.key(o) != "slot-two" || tb.keyLive != 11 || tb.keyDead != 0 {
		t.Fatalf("keys %q %q, %d live and %d dead bytes", tb.key(s), tb.key(o), tb.keyLive, tb.keyDead)
	}
	arena := tb.arenaUsed
	// A longer key does not fit in o's old slot name's bytes: new ones.
	tb.handKey(s, o, keyHash("key"), keyHash("slot-two"), "slot-three", keyHash("slot-three"))
	if tb.get("key") != o || tb.get("slot-three") != s || tb.get("slot-two") != nil || tb.key(s) != "slot-three" || tb.key(o) != "key" {
		t.Fatalf("after a longer hand-over: key -> %v, slot-three -> %v", tb.get("key"), tb.get("slot-three"))
	}
	if tb.keyLive != 13 || tb.keyDead != 8 || tb.arenaUsed != arena+len("slot-three") {
		t.Fatalf("%d live and %d dead bytes, arena %d (was %d)", tb.keyLive, tb.keyDead, tb.arenaUsed, arena)
	}
	// A shorter one fits: the rest of the old bytes is dead.
	tb.handKey(o, s, keyHash("key"), keyHash("slot-three"), "slot-4", keyHash("slot-4"))
	if tb.get("key") != s || tb.get("slot-4") != o || tb.keyLive != 9 || tb.keyDead != 12 {
		t.Fatalf("after a shorter hand-over: key -> %v, slot-4 -> %v, %d live and %d dead bytes", tb.get("key"), tb.get("slot-4"), tb.keyLive, tb.keyDead)
	}
}

// A client upserting its keys through reused slots, on a table with other
// keys, keeps every key and slot findable and does not grow the key arena.
func TestCommitNextReuseKeepsArena(t *testing.T) {
	m, _ := newTestMaster(t, Config{Durable: true}, map[string]uint64{"a": 64 << 20, "b": 64 << 20})
	for i := range 1000 {
		mustPut(t, m, fmt.Sprintf("other/%05d", i), 100, ReplicateConfig{})
	}
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("client/key/%03d", i)
	}
	slot, _ := reserve(t, m, "w", 100, keys[0])
	var arena int
	for i := range 20 * len(keys) {
		key := keys[i%len(keys)]
		c := m.CommitNext("w", key, slot, uint32(i), ReplicateConfig{}, true, SlotAsk{Size: 100, KeyLen: len(key)})
		if c.Err != nil || c.Gone || c.Slot == "" {
			t.Fatalf("put %d of %q: %+v", i, key, c)
		}
		slot = c.Slot
		if i == 2*len(keys) { // every key put twice: reuse from now on
			arena = m.objects.arenaUsed
		}
	}
	if m.objects.arenaUsed != arena {
		t.Fatalf("the key arena grew from %d to %d bytes with reused slots", arena, m.objects.arenaUsed)
	}
	if st := m.Stats(); st.SlotsReused < uint64(17*len(keys)) || st.Objects != 1000+len(keys) || st.PutSlots != 1 {
		t.Fatalf("stats %+v", st)
	}
	for i, key := range keys {
		info, err := m.GetReplicaList(key)
		if want := uint32(19*len(keys) + i); err != nil || info.CRC != want {
			t.Fatalf("%q = %+v, %v: want CRC %d", key, info, err, want)
		}
	}
	checkInvariants(t, m)
}
