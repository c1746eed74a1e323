package master

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// validPut checks the parameters of a put.
func (m *Master) validPut(key string, size uint64, rc ReplicateConfig) error {
	if err := m.checkKey(key); err != nil {
		return err
	}
	if size == 0 {
		return fmt.Errorf("%w: empty value", ErrInvalidParams)
	}
	if rc.Replicas < 0 || rc.Replicas > m.cfg.MaxReplicas {
		return fmt.Errorf("%w: replica count %d not in [1,%d]", ErrInvalidParams, rc.Replicas, m.cfg.MaxReplicas)
	}
	if rc.SoftPinTTL < 0 || rc.SoftPinTTL > m.cfg.MaxSoftPinTTL {
		return fmt.Errorf("%w: soft pin TTL %v not in [0,%v]", ErrInvalidParams, rc.SoftPinTTL, m.cfg.MaxSoftPinTTL)
	}
	return nil
}

// PutStart allocates space for an object's replicas on distinct segments and
// returns where to write them. The object stays invisible until PutEnd. The
// replica count is best effort: fewer replicas than asked are returned when
// there are fewer segments with room, and at least one is always placed (or
// the call fails with ErrNoSpace). An existing key is refused with
// ErrObjectExists (Upsert overwrites).
func (m *Master) PutStart(clientID, key string, size uint64, rc ReplicateConfig) ([]Replica, error) {
	if err := m.validPut(key, size, rc); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	if o := m.objects.get(key); o != nil {
		if o.complete || now.Sub(o.created.time()) < m.cfg.PutTimeout {
			return nil, fmt.Errorf("%w: %q", ErrObjectExists, key)
		}
		m.preemptLocked(o, now) // a zombie put: take the key over
	}
	if d := m.disk[key]; rc.PromoteSeq != 0 && (d == nil || d.seq != rc.PromoteSeq) {
		return nil, fmt.Errorf("%w: %q (disk copy to promote is gone)", ErrObjectNotFound, key)
	}
	return m.putStartLocked(clientID, key, size, rc, now)
}

// putStartLocked places a new object's replicas and records it as a put
// in progress owned by clientID.
func (m *Master) putStartLocked(clientID, key string, size uint64, rc ReplicateConfig, now time.Time) ([]Replica, error) {
	var hdr uint64
	if m.cfg.Durable {
		hdr = headerLen(key)
	}
	if err := m.checkFitsLocked(hdr + size); err != nil {
		return nil, err
	}
	if err := m.memoryAdmitLocked(); err != nil {
		return nil, err
	}
	if err := m.tenantAdmitLocked(key, size*uint64(max(rc.Replicas, 1)), nil); err != nil {
		return nil, err
	}
	reps, err := m.placeOrEvictLocked(clientID, ownerOf(key), hdr+size, max(rc.Replicas, 1), rc.PreferredSegments, now)
	if err != nil {
		return nil, err
	}
	m.seq++
	o := m.objects.add(key, object{size: size, created: nanoOf(now), lastAccess: nanoOf(now), hdr: uint32(hdr), seq: m.seq})
	m.objects.setOwner(o, clientID)
	o.pin(rc, m.cfg.SoftPinTTL, now)
	m.placeReplicasLocked(o, reps)
	m.addPendingLocked(o, key)
	m.stats.PutStarts++
	return m.descriptors(o), nil
}

// placeReplicasLocked makes the places reps the replicas of o, a new
// object.
func (m *Master) placeReplicasLocked(o *object, reps []place) {
	rs := make([]replica, len(reps))
	for i, p := range reps {
		rs[i] = replica{seg: p.seg.id, off: p.off}
	}
	m.objects.setReps(o, rs)
	for _, p := range reps {
		m.segAdd(p.seg, o)
	}
}

// pin sets the object's pins from a put's policy (a soft pin of
// defaultTTL when the policy names none).
func (o *object) pin(rc ReplicateConfig, defaultTTL time.Duration, now time.Time) {
	o.hardPin, o.softPinUntil = rc.HardPin, 0
	if rc.SoftPin {
		o.softPinUntil = nanoOf(now.Add(cmp.Or(rc.SoftPinTTL, defaultTTL)))
	}
}

// PutEnd makes an object visible with the CRC32C of its value.
func (m *Master) PutEnd(clientID, key string, crc uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.putEndLocked(clientID, key, crc)
}

func (m *Master) putEndLocked(clientID, key string, crc uint32) error {
	return m.putEndAtLocked(clientID, key, keyHash(key), crc, m.clock.Now())
}

// putEndAtLocked is putEndLocked of key, whose keyHash is h, at now (both
// worked out before the lock).
func (m *Master) putEndAtLocked(clientID, key string, h, crc uint32, now time.Time) error {
	o := m.objects.getHashed(key, h)
	if o == nil {
		return fmt.Errorf("%w: %q (put expired or removed)", ErrObjectNotFound, key)
	}
	if o.complete {
		return fmt.Errorf("%w: %q", ErrObjectExists, key)
	}
	if m.ownerID(o) != clientID {
		return fmt.Errorf("%w: %q", ErrNotOwner, key)
	}
	o.complete = true
	m.dropPendingLocked(o, key)
	o.crc = crc
	o.touch(now)
	m.stats.Puts++
	m.dropDiskLocked(key, true) // the disk copy, if any, is an older version
	m.storedAtLocked(o, key, now)
	return nil
}

// PutRevoke abandons an unfinished put and releases its space.
func (m *Master) PutRevoke(clientID, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objects.get(key)
	if o == nil || o.complete {
		return fmt.Errorf("%w: no put in progress for %q", ErrObjectNotFound, key)
	}
	if m.ownerID(o) != clientID {
		return fmt.Errorf("%w: %q", ErrNotOwner, key)
	}
	m.freeLocked(o)
	m.stats.PutRevokes++
	return nil
}

// Upsert starts a put that replaces the key's current value. An unleased
// complete object of the same size keeps its space (the value is rewritten in
// place and the object is invisible until PutEnd); otherwise the old object
// is removed first. A leased object is retired: its space stays reserved
// until the lease ends while the new value takes a new place. A put in
// progress is refused with ErrObjectExists.
func (m *Master) Upsert(clientID, key string, size uint64, rc ReplicateConfig) ([]Replica, error) {
	if err := m.validPut(key, size, rc); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	defer m.keepSoftPinLocked(key, rc, m.committedSoftPinLocked(key), now)
	if o := m.objects.get(key); o != nil {
		switch {
		case !o.complete && now.Sub(o.created.time()) < m.cfg.PutTimeout:
			return nil, fmt.Errorf("%w: put in progress for %q", ErrObjectExists, key)
		case !o.complete:
			m.preemptLocked(o, now)
		case o.leaseUntil.after(now):
			m.retireLeasedLocked(o, now) // readers keep the old value until their lease ends
		case o.size == size && int(o.nrep) >= max(rc.Replicas, 1):
			return m.rewriteInPlaceLocked(o, key, clientID, rc, now), nil
		default:
			m.freeLocked(o)
		}
	}
	return m.putStartLocked(clientID, key, size, rc, now)
}

// rewriteInPlaceLocked turns a complete object back into a put in progress
// owned by clientID, keeping its space and replicas.
func (m *Master) rewriteInPlaceLocked(o *object, key, clientID string, rc ReplicateConfig, now time.Time) []Replica {
	m.goneLocked(o) // invisible until PutEnd
	m.seq++
	o.complete, o.created, o.crc, o.seq, o.restored = false, nanoOf(now), 0, m.seq, false
	m.objects.setOwner(o, clientID)
	m.addPendingLocked(o, key)
	o.touch(now)
	o.pin(rc, m.cfg.SoftPinTTL, now)
	m.stats.PutStarts++
	return m.descriptors(o)
}

// freeLocked releases an object's space and forgets it.
func (m *Master) freeLocked(o *object) {
	key := m.goneLocked(o)
	alias := m.takePriorLocked(o)
	for _, r := range m.reps(o) {
		m.freeRangeLocked(m.segOf(r), r.off, o.alloc(), key, o.seq, o.header(), alias, m.grantHoldLocked(o))
		m.segDrop(m.segOf(r), o)
	}
	m.forgetLocked(o, key)
}

// forgetLocked takes o, of key, out of the object table (and the unfinished
// puts).
func (m *Master) forgetLocked(o *object, key string) {
	if len(m.priors) > 0 {
		m.confirmPriorLocked(o.id) // a slot gone with its segment
	}
	m.dropPendingLocked(o, key)
	m.objects.del(o)
}

// preemptLocked forgets a zombie put but keeps its space reserved until the
// release timeout, since its writer may still be writing.
func (m *Master) preemptLocked(o *object, now time.Time) {
	m.reserveUnfinishedLocked(o)
	m.stats.PutsTimedOut++
}

// reserveUnfinishedLocked forgets the unfinished put o but keeps its space
// reserved until its release timeout (a zombie): its writer may still be
// writing there, and were the bytes handed to another object first, that
// writer's late bytes would corrupt it.
func (m *Master) reserveUnfinishedLocked(o *object) {
	release := o.created.time().Add(m.cfg.PutReleaseTimeout)
	key := m.keyOf(o)
	alias := m.takePriorLocked(o)
	for _, r := range m.reps(o) {
		m.segDrop(m.segOf(r), o)
		m.zombies = append(m.zombies, zombie{seg: m.segOf(r), off: r.off, size: o.alloc(), releaseAt: release, key: key, seq: o.seq, hdr: o.header(), alias: alias})
	}
	m.forgetLocked(o, key)
}

// expirePutsLocked cleans up the puts older than PutTimeout that nobody
// will finish (their owner is gone) or that are past PutReleaseTimeout.
func (m *Master) expirePutsLocked(now time.Time) {
	for id := range m.pending {
		o := m.objects.at(id)
		if now.Sub(o.created.time()) < m.cfg.PutTimeout {
			continue
		}
		if _, alive := m.clients[m.ownerID(o)]; !alive || now.Sub(o.created.time()) >= m.cfg.PutReleaseTimeout {
			m.freeLocked(o) // nobody will finish it, or it is far too late
			m.stats.PutsTimedOut++
		}
	}
}

// releaseZombiesLocked frees the space of preempted puts whose release
// time has come.
func (m *Master) releaseZombiesLocked(now time.Time) {
	m.zombies = slices.DeleteFunc(m.zombies, func(z zombie) bool {
		if now.Before(z.releaseAt) {
			return false
		}
		m.freeRangeLocked(z.seg, z.off, z.size, z.key, z.seq, z.hdr, z.alias, 0) // past any grant: released after PutReleaseTimeout
		return true
	})
}
