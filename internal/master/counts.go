package master

import (
	"strings"
	"time"
)

// Status figures without scans: every figure of Stats and Summary is kept
// up to date where objects change (storedLocked, goneLocked, the replica
// and lease changes), so reading them costs O(1), or O(segments), whatever
// the number of objects.

// counts are the gauges of the complete objects in memory.
type counts struct {
	replicas     int    // memory replicas of complete objects
	replicaBytes uint64 // their value bytes
	hardPinned   int    // complete objects with a hard pin
	putSlots     int    // unfinished puts that are put slots (slot.go)
	leases       *deadlines
	softPins     *deadlines // complete objects soft-pinned and not hard-pinned
}

// deadlineSlots is the size of a deadlines ring.
const deadlineSlots = 4096

// deadlines counts the objects whose deadline (a lease's or a soft pin's
// end) is still ahead: O(1) per change, O(deadlineSlots) per read. A
// deadline is rounded up to a granule of span/(deadlineSlots-2), span being
// the longest deadline ahead of now that is ever added, so a count read at
// now may include objects whose deadline passed less than one granule ago.
// Each slot holds the count of one granule and the granule's number; a slot
// is reused only by a granule deadlineSlots later, when its old one has long
// passed.
type deadlines struct {
	g     int64 // granule in nanoseconds
	epoch [deadlineSlots]int64
	n     [deadlineSlots]int32
}

func newDeadlines(span time.Duration) *deadlines {
	return &deadlines{g: max(1, int64(span)/(deadlineSlots-2)+1)}
}

func (d *deadlines) granule(t time.Time) int64 { return (t.UnixNano() + d.g - 1) / d.g }

// add counts one more object with deadline t (delta -1: one fewer). A
// deadline whose granule has passed (live no longer counts it) is not
// counted, and not taken away: the rule is the same at both ends, so a
// deadline that passed between them leaves no count behind.
func (d *deadlines) add(t, now time.Time, delta int32) {
	if t.IsZero() {
		return
	}
	i := d.granule(t)
	if i <= now.UnixNano()/d.g {
		return
	}
	s := i % deadlineSlots
	if d.epoch[s] != i {
		if delta < 0 {
			return // its granule's count was already dropped
		}
		d.epoch[s], d.n[s] = i, 0
	}
	d.n[s] += delta
}

// move is the change of one object's deadline from old to t.
func (d *deadlines) move(old, t, now time.Time) {
	d.add(old, now, -1)
	d.add(t, now, 1)
}

// live counts the objects whose deadline is after now.
func (d *deadlines) live(now time.Time) int {
	cur := now.UnixNano() / d.g
	n := 0
	for s := range d.epoch {
		if d.epoch[s] > cur {
			n += int(d.n[s])
		}
	}
	return n
}

// storedLocked notes that o became visible (a put ended, a slot was
// committed, a node re-reported it): the listing index, the counts and the
// Stored event.
func (m *Master) storedLocked(o *object, key string) { m.storedAtLocked(o, key, m.clock.Now()) }

// storedAtLocked is storedLocked at now (read before the lock).
func (m *Master) storedAtLocked(o *object, key string, now time.Time) {
	m.indexObjectLocked(o, key)
	m.countAtLocked(o, 1, now)
	m.emitStored(key)
}

// countLocked adds (sign 1) or takes away (sign -1) the complete object o's
// share of the gauges.
func (m *Master) countLocked(o *object, sign int) { m.countAtLocked(o, sign, m.clock.Now()) }

// countAtLocked is countLocked at now (a caller that counts many objects
// reads the clock once).
func (m *Master) countAtLocked(o *object, sign int, now time.Time) {
	m.counts.replicas += sign * int(o.nrep)
	m.counts.replicaBytes += uint64(sign) * o.size * uint64(o.nrep)
	if o.hardPin {
		m.counts.hardPinned += sign
	} else {
		m.counts.softPins.add(o.softPinUntil.time(), now, int32(sign))
	}
	m.counts.leases.add(o.leaseUntil.time(), now, int32(sign))
	m.tenantCountLocked(o, sign)
}

// replicasChangedLocked is called after the replica list of o changed by
// delta entries.
func (m *Master) replicasChangedLocked(o *object, delta int) {
	if !o.complete {
		return
	}
	m.counts.replicas += delta
	m.counts.replicaBytes += uint64(delta) * o.size
	m.tenantReplicasLocked(o, delta)
}

// leaseLocked extends o's read lease to until (when later).
func (m *Master) leaseLocked(o *object, until time.Time) {
	if !nanoOf(until).after(o.leaseUntil.time()) {
		return
	}
	if o.complete {
		m.counts.leases.move(o.leaseUntil.time(), until, m.clock.Now())
	}
	o.leaseUntil = nanoOf(until)
}

// addPendingLocked records o, of key, as an unfinished put.
func (m *Master) addPendingLocked(o *object, key string) {
	n := len(m.pending)
	m.pending[o.id] = struct{}{}
	if len(m.pending) > n && strings.HasPrefix(key, SlotPrefix) {
		m.counts.putSlots++
	}
	m.tenantPendingLocked(o, key)
}

// dropPendingLocked forgets o, of key, as an unfinished put, if it was
// one.
func (m *Master) dropPendingLocked(o *object, key string) {
	n := len(m.pending)
	delete(m.pending, o.id)
	if len(m.pending) < n && strings.HasPrefix(key, SlotPrefix) {
		m.counts.putSlots--
	}
	m.tenantUnpendLocked(key)
}
