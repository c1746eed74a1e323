package master

import "time"

// retireLeasedLocked forgets a complete object that readers hold a lease on,
// as an upsert replaces it: the key no longer names it, and its space stays
// reserved (a zombie) until the lease ends, so a reader that was granted the
// lease reads the old value whole rather than the new one's bytes. An upsert
// therefore never fails on a lease, as Mooncake's (which has no lease check).
func (m *Master) retireLeasedLocked(o *object, now time.Time) {
	m.goneLocked(o)
	release := o.leaseUntil.time()
	if release.Before(now) {
		release = now
	}
	key := m.keyOf(o)
	for _, r := range m.reps(o) {
		m.segDrop(m.segOf(r), o)
		m.zombies = append(m.zombies, zombie{seg: m.segOf(r), off: r.off, size: o.alloc(), releaseAt: release, key: key, seq: o.seq, hdr: o.header()})
	}
	m.forgetLocked(o, key)
}
