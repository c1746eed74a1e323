package master

import (
	"strings"
)

// Reused put slots: an upsert's replaced version becomes the client's next
// slot.
//
// A commit that replaces a version of the same size and header length (and
// replica count) hands that version's space to the client as the slot it
// asked for, instead of freeing it (a tombstone until its node zeroes the
// header) and allocating a fresh slot: no allocator work, no tombstone, no
// heartbeat traffic, and the client writes to pages it wrote before.
//
// The replaced version must be unleased (no reader holds it; a leased one is
// retired as before). Its header stays in the slot until the client writes
// its next put there, and with durable metadata a restore must never bring
// it back. While its key has a newer version, it cannot: the newer version's
// header is valid and wins by sequence number. So the slot remembers the
// older header (a prior) until its commit (the client wrote over it) or its
// end:
//   - the slot freed or made a zombie uncommitted: its tombstone carries the
//     slot's sequence number, which zeroes the older header too
//     (objheader.Clear zeroes headers up to it), and is indexed under the
//     older key as well (tomb.alias), so removing that key names it;
//   - the key's newest version goes other than by a commit that replaces it
//     in the same hold (removed, evicted, freed at a put's start, its node
//     gone): the slot is revoked. A held tombstone of the older header (no
//     bytes of its own: they stay the slot's) is filed under the key, so a
//     remover zeroes it before its call returns and the node zeroes it at
//     its next heartbeat; the slot's commit is refused (the client puts the
//     usual way) since those blind zeros may land on the client's header.
//
// Only one slot holds a key's older header at a time. With tenant accounts
// the replaced version is uncharged as it goes (goneLocked) and the slot,
// like every put slot, is charged when it is committed to a key (admitted
// there against the key's tenant's quota), so a reused slot is accounted
// exactly as a fresh one.

// prior is the older version's header a reused slot may hold.
type prior struct {
	key     string
	seq     uint64
	revoked bool
}

// reusableLocked reports whether o, key's complete unleased version that a
// commit of the slot of record ID sid replaces, can be the committing
// client's next slot of ask with policy rc.
func (m *Master) reusableLocked(o *object, key string, sid uint32, ask SlotAsk, askHdr uint64, rc ReplicateConfig) bool {
	if o.size != ask.Size || int(o.nrep) != max(rc.Replicas, 1) || len(rc.PreferredSegments) > 0 || rc.PromoteSeq != 0 {
		return false
	}
	if o.header() != askHdr {
		return false
	}
	if h, held := m.priorSlot[key]; held && h != sid { // the committed slot's own is overwritten
		return false
	}
	for _, r := range m.reps(o) {
		// A segment in segTab is mounted (unmountLocked clears both).
		s := m.segOf(r)
		if s == nil || s.draining || m.evacuatingLocked(s) || m.restoringLocked(s) {
			return false
		}
	}
	return true
}

// reuseAsSlotLocked makes o, the version of a.key that a's commit of slot
// s replaces, the client's next slot, and returns its placeholder key and
// replicas (as PutReserve). s takes the key in the object table.
func (m *Master) reuseAsSlotLocked(o, s *object, a *commitArgs) (string, []Replica) {
	key := a.key
	m.goneAtLocked(o, key, a.now) // replacing (commitSlotLocked)
	m.seq++
	slot := a.slotName(m.seq)
	if o.header() > 0 {
		m.priors[o.id] = prior{key: key, seq: o.seq}
		m.priorSlot[key] = o.id
	}
	m.objects.handKey(o, s, a.keyHash, a.slotHash, slot, keyHash(slot))
	o.seq, o.complete, o.crc, o.restored, o.chained, o.depth = m.seq, false, 0, false, false, 0
	o.created, o.lastAccess, o.leaseUntil = nanoOf(a.now), nanoOf(a.now), 0
	m.objects.setOwner(o, a.clientID)
	o.pin(a.rc, m.cfg.SoftPinTTL, a.now)
	m.addPendingLocked(o, slot)
	m.stats.SlotsReused++
	return slot, m.descriptorsInto(a.reps, o)
}

// confirmPriorLocked forgets the older header of the slot of record ID
// id, committed: the client wrote its own over it.
func (m *Master) confirmPriorLocked(id uint32) {
	if p, ok := m.priors[id]; ok {
		delete(m.priors, id)
		if m.priorSlot[p.key] == id {
			delete(m.priorSlot, p.key)
		}
	}
}

// takePriorLocked forgets the older header of o, a slot ending
// uncommitted, and returns its key ("" for none): the tombstone the slot
// leaves is filed under it too.
func (m *Master) takePriorLocked(o *object) string {
	if len(m.priors) == 0 {
		return ""
	}
	p, ok := m.priors[o.id]
	if !ok {
		return ""
	}
	m.confirmPriorLocked(o.id)
	return p.key
}

// revokePriorLocked revokes the slot holding an older header of key, whose
// newest version is going: a held tombstone is filed for each replica's
// header, and the slot's commit will be refused.
func (m *Master) revokePriorLocked(key string) {
	if len(m.priorSlot) == 0 {
		return
	}
	sid, ok := m.priorSlot[key]
	if !ok {
		return
	}
	p := m.priors[sid]
	if p.revoked {
		return
	}
	if _, ok := m.pending[sid]; !ok { // cannot happen: a slot's end forgets its prior
		m.confirmPriorLocked(sid)
		return
	}
	p.revoked = true
	m.priors[sid] = p
	for _, r := range m.reps(m.objects.at(sid)) {
		if s := m.segOf(r); s != nil && m.segments[s.key] == s {
			m.addTombLocked(s, r.off, tomb{key: key, seq: p.seq})
		}
	}
}

// headerLenOf is headerLen of a key of n bytes.
func headerLenOf(n int) uint64 {
	if n <= len(someKey) {
		return headerLen(someKey[:n])
	}
	return headerLen(strings.Repeat("k", n))
}

// someKey: a key of any length up to its own, without an allocation.
var someKey = strings.Repeat("k", 4096)
