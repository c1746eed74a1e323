package master

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkUpsertKeys: one upsert through a put slot (CommitNext: the
// commit replacing the key's version, whose space becomes the next slot),
// of keys drawn at random among n existing ones: the master's work (most
// of it under its lock) per put of `mooncake bench store`'s put phase as the
// number of keys grows (the listing index's and the hash index's working
// sets leave the caches). Every key is upserted once before the timing (a
// bench's put phase upserts the keys its load put, again and again).
func BenchmarkUpsertKeys(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			m, keys, slot, ask := upsertPool(b, n)
			order := rand.New(rand.NewPCG(1, 2)).Perm(n)
			var todo []HeaderRef
			upsert := func(i int) {
				c := m.CommitNext("c", keys[order[i%n]], slot, 1, ReplicateConfig{}, true, ask)
				if c.Gone || c.Err != nil || c.Slot == "" {
					b.Fatalf("CommitNext = %+v", c)
				}
				slot = c.Slot
				if i%1024 == 1023 {
					_, _, todo = m.Heartbeat("c", todo)
				}
			}
			for i := range n {
				upsert(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				upsert(i)
			}
		})
	}
}
