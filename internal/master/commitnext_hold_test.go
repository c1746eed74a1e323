package master

import "time"

// commitNextHeld is CommitNext that also returns how long it held the
// master's lock (BenchmarkCommitNextParallel's hold-ns/op).
func commitNextHeld(m *Master, clientID, key, slot string, crc uint32, rc ReplicateConfig, upsert bool, ask SlotAsk) (Committed, time.Duration) {
	var out Committed
	reuse := &ask
	m.mu.Lock()
	t0 := time.Now()
	out.Tombs, out.Gone, out.Err, out.Slot, out.Next = m.commitSlotLocked(clientID, key, slot, crc, rc, upsert, reuse)
	if out.Err == nil && !out.Gone && out.Slot == "" {
		out.Slot, out.Next, out.ReserveErr = m.putReserveLocked(clientID, ask.Size, ask.KeyLen, rc)
	}
	d := time.Since(t0)
	m.mu.Unlock()
	return out, d
}
