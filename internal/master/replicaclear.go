package master

import (
	"fmt"
	"slices"
	"time"
)

// BatchReplicaClear is Mooncake's BatchReplicaClear: it drops replicas of
// the given keys that clientID put, and returns the keys it cleared (in
// request order) with the tombstones of the freed headers (Config.Durable)
// for the caller to zero.
//
// With segment "" every copy of a key goes (memory replicas and its disk
// copy: the object is removed); otherwise only the copies on that segment
// go, and the object is removed when none is left. A key is skipped, never
// failed, when it is empty, unknown, put by another client, unfinished (an
// upsert or put in progress), has no copy on the segment, or is in use: a
// read lease is held (GetReplicaList), or it was written, read or checked
// (Exist) less than one LeaseTTL ago. The last rule is ours: Mooncake's
// PutEnd and ExistKey grant the lease themselves and Exist here does not.
func (m *Master) BatchReplicaClear(clientID string, keys []string, segment string) ([]string, []HeaderRef, error) {
	if clientID == "" {
		return nil, nil, fmt.Errorf("%w: replica clear needs a client id", ErrInvalidParams)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	cleared := []string{}
	durable := map[string]bool{}
	for _, key := range keys {
		if key == "" {
			continue
		}
		o := m.objects.get(key)
		if o == nil || m.ownerID(o) != clientID || !o.complete || m.inUseLocked(o, now) {
			continue
		}
		var ok bool
		if segment == "" {
			ok = m.clearAllLocked(o, key)
		} else {
			ok = m.clearOnSegmentLocked(o, key, segment)
		}
		if !ok {
			continue
		}
		cleared = append(cleared, key)
		if o.hdr > 0 {
			durable[key] = true
		}
	}
	return cleared, m.tombsOfLocked(durable), nil
}

// inUseLocked reports whether replica clear must leave o alone: a read
// lease is held, or it was accessed within the last LeaseTTL.
func (m *Master) inUseLocked(o *object, now time.Time) bool {
	return o.leaseUntil.after(now) || now.Before(o.lastAccess.time().Add(m.cfg.LeaseTTL))
}

// clearAllLocked removes o and its disk copy.
func (m *Master) clearAllLocked(o *object, key string) bool {
	m.freeLocked(o)
	if m.disk[key] != nil {
		m.goneDiskLocked(key)
	}
	m.stats.Removes++
	return true
}

// clearOnSegmentLocked drops o's memory replica and disk copy on segment,
// removing o when no copy is left. It reports whether anything was there.
func (m *Master) clearOnSegmentLocked(o *object, key, segment string) bool {
	onSeg := func(r replica) bool { return m.segOf(r).spec.Name == segment }
	d := m.disk[key]
	diskHere := d != nil && d.seg.spec.Name == segment
	if !slices.ContainsFunc(m.reps(o), onSeg) && !diskHere {
		return false
	}
	if !slices.ContainsFunc(m.reps(o), func(r replica) bool { return !onSeg(r) }) && (d == nil || diskHere) {
		return m.clearAllLocked(o, key) // nothing would be left
	}
	for _, r := range m.reps(o) {
		if onSeg(r) {
			m.freeRangeLocked(m.segOf(r), r.off, o.alloc(), key, o.seq, o.header(), "", m.grantHoldLocked(o))
			m.segDrop(m.segOf(r), o)
		}
	}
	n := int(o.nrep)
	m.objects.setReps(o, slices.DeleteFunc(m.reps(o), onSeg))
	m.replicasChangedLocked(o, int(o.nrep)-n)
	if diskHere {
		m.dropDiskLocked(key, true) // the memory replicas hold this version: no removal record
	}
	if o.nrep == 0 {
		// Only the disk copy on another segment is left: it serves the key.
		if m.cfg.Events != nil {
			m.cfg.Events.Removed(key, TierMemory)
		}
		m.countLocked(o, -1) // its pins and lease (no replica is left)
		m.unindexObjectLocked(o, key)
		m.forgetLocked(o, key)
	}
	return true
}
