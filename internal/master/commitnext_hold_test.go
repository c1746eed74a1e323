package master

import "time"

// commitNextHeld is CommitNext that also returns how long it held the
// master's lock (BenchmarkCommitNextParallel's hold-ns/op).
func commitNextHeld(m *Master, clientID, key, slot string, crc uint32, rc ReplicateConfig, upsert bool, ask SlotAsk) (Committed, time.Duration) {
	var out Committed
	a := m.commitArgs(clientID, key, slot, crc, rc, upsert)
	a.withAsk(m, ask)
	m.mu.Lock()
	t0 := time.Now()
	m.commitNextLocked(&a, &out)
	d := time.Since(t0)
	m.mu.Unlock()
	return out, d
}
