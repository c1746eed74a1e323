package master

import (
	"fmt"
	"testing"
)

// BenchmarkSlotUpsert: the master's work of one small put from a client
// holding a put slot, as `mooncake bench store`'s put phase makes it: the
// commit of the slot as an upsert of one of 1,024 existing keys, the
// reservation of the next slot, and the node's share of the heartbeats
// that zero the replaced versions' headers (one every 1,024 puts).
// commit+reserve: two calls, two holds of the lock; CommitNext: one.
func BenchmarkSlotUpsert(b *testing.B) {
	for _, one := range []bool{false, true} {
		name := "commit+reserve"
		if one {
			name = "CommitNext"
		}
		b.Run(name, func(b *testing.B) { benchSlotUpsert(b, one) })
	}
}

func benchSlotUpsert(b *testing.B, one bool) {
	m, keys, slot, ask := upsertPool(b, 1024)
	var todo []HeaderRef
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if one {
			c := m.CommitNext("c", keys[i%len(keys)], slot, 1, ReplicateConfig{}, true, ask)
			if c.Gone || c.Err != nil || c.Slot == "" {
				b.Fatalf("CommitNext = %+v", c)
			}
			slot = c.Slot
		} else {
			if _, gone, err := m.PutCommit("c", keys[i%len(keys)], slot, 1, ReplicateConfig{}, true); gone || err != nil {
				b.Fatalf("commit: gone=%v err=%v", gone, err)
			}
			var err error
			if slot, _, err = m.PutReserve("c", 4096, len(keys[0]), ReplicateConfig{}); err != nil {
				b.Fatal(err)
			}
		}
		if i%1024 == 1023 {
			_, _, todo = m.Heartbeat("c", todo)
		}
	}
}

// BenchmarkHeartbeatFull: one heartbeat of a node reporting a full answer
// of zeroed tombstones (maxTombsPerPing, replaced versions of upserts) and
// fetching the next: how long a heartbeat holds the master's lock (ns/op).
func BenchmarkHeartbeatFull(b *testing.B) {
	m, err := New(Config{Durable: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.MountSegment("c", SegmentSpec{Name: "s", Endpoint: "e:1", Base: 1 << 30, Size: 1 << 36}); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 2*maxTombsPerPing)
	for i := range keys {
		keys[i] = fmt.Sprintf("k/%09d", i)
	}
	var todo []HeaderRef
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		for _, k := range keys { // a new size: the old version is freed
			if _, err := m.Upsert("c", k, uint64(4096+64*(i%2)), ReplicateConfig{}); err != nil {
				b.Fatal(err)
			}
			m.PutEnd("c", k, 1)
		}
		b.StartTimer()
		_, _, todo = m.Heartbeat("c", todo)
	}
}

// BenchmarkHeartbeatTodo: the last hold of a heartbeat, listing a full
// answer of tombstones to zero (maxTombsPerPing of 2x that pending).
func BenchmarkHeartbeatTodo(b *testing.B) {
	m, err := New(Config{Durable: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.MountSegment("c", SegmentSpec{Name: "s", Endpoint: "e:1", Base: 1 << 30, Size: 1 << 36}); err != nil {
		b.Fatal(err)
	}
	for i := range 2 * maxTombsPerPing {
		k := fmt.Sprintf("k/%09d", i)
		for size := uint64(4096); size <= 4096+64; size += 64 {
			if _, err := m.Upsert("c", k, size, ReplicateConfig{}); err != nil {
				b.Fatal(err)
			}
			m.PutEnd("c", k, 1)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, _, todo := m.Heartbeat("c", nil); len(todo) != maxTombsPerPing {
			b.Fatalf("%d tombstones listed", len(todo))
		}
	}
}

// upsertPool is a durable master with one client "c" whose segment holds
// n stored 4 KiB keys, the client's put slot for upserts of them, and the
// ask a CommitNext of them makes.
func upsertPool(b *testing.B, n int) (*Master, []string, string, SlotAsk) {
	b.Helper()
	m, err := New(Config{Durable: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.MountSegment("c", SegmentSpec{Name: "s", Endpoint: "e:1", Base: 1 << 30, Size: 1 << 34}); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/%d/%09d", 3, i)
		if _, err := m.PutStart("c", keys[i], 4096, ReplicateConfig{}); err != nil {
			b.Fatal(err)
		}
		m.PutEnd("c", keys[i], 1)
	}
	slot, _, err := m.PutReserve("c", 4096, len(keys[0]), ReplicateConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return m, keys, slot, SlotAsk{Size: 4096, KeyLen: len(keys[0])}
}
