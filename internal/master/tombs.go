package master

import (
	"fmt"
	"slices"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
)

// Tombstones: freed durable objects whose header is not zeroed yet (see
// restore.go for why they exist). This file keeps them and their indexes.

// maxTombsPerPing bounds the tombstones one Heartbeat answer carries.
const maxTombsPerPing = 16 * 1024

// freeRangeLocked frees the n bytes at off in s. For a durable object
// (hdr > 0) the first Align bytes stay allocated as a tombstone.
// alias is the key of an older version whose header may lie at off (a
// reused put slot, slot.go), "" for none.
func (m *Master) freeRangeLocked(s *segment, off, n uint64, key string, seq, hdr uint64, alias string, hold nanotime) {
	if hdr == 0 || m.segments[s.key] != s {
		m.releaseLocked(s, off, n, ownerOf(key), hold)
		return
	}
	q := m.cfg.Align
	toDisk := m.offload && s.spec.OffloadOnEvict && s.spec.DiskURL != ""
	if toDisk {
		q = s.alloc.Rounded(n) // the node copies the whole object to disk first
	}
	if rest := s.alloc.Rounded(n) - q; rest > 0 {
		m.releaseLocked(s, off+q, rest, ownerOf(key), hold)
	}
	m.addTombLocked(s, off, tomb{key: key, seq: seq, alias: alias, n: q, off: toDisk, hold: hold})
}

// tombLoc is where one tombstone lies.
type tombLoc struct {
	seg *segment
	off uint64
}

// keyTombs are the tombstones of one key (usually one): the index that
// lets a remove return the tombstones of the keys it removed in O(keys).
type keyTombs struct {
	seq uint64 // highest sequence number among them (put slots, slot.go)
	at  []tombLoc
}

// addTombLocked records the tombstone tb at offset off of s. A held
// tombstone there (a revoked slot's, slot.go) gives way to it, passing on
// when it was last named.
func (m *Master) addTombLocked(s *segment, off uint64, tb tomb) {
	if old, ok := s.tombs[off]; ok {
		delete(s.tombs, off)
		m.untombLocked(s, off, old)
		tb.named = max(tb.named, old.named)
	}
	s.tombs[off] = tb
	m.indexTombLocked(s, off, tb.key, tb.seq)
	if tb.alias != "" {
		m.indexTombLocked(s, off, tb.alias, tb.seq)
	}
}

func (m *Master) indexTombLocked(s *segment, off uint64, key string, seq uint64) {
	e := m.tombIdx[key]
	if e == nil {
		e = &keyTombs{}
		m.tombIdx[key] = e
	}
	e.at = append(e.at, tombLoc{seg: s, off: off})
	e.seq = max(e.seq, seq)
}

// dropTombLocked forgets the tombstone at off of s (its space is the
// caller's to free).
func (m *Master) dropTombLocked(s *segment, off uint64) {
	tb, ok := s.tombs[off]
	if !ok {
		return
	}
	delete(s.tombs, off)
	m.untombLocked(s, off, tb)
}

// untombLocked takes the tombstone tb at off of s (no longer filed in
// s.tombs) out of the index.
func (m *Master) untombLocked(s *segment, off uint64, tb tomb) {
	m.unindexTombLocked(s, off, tb.key)
	if tb.alias != "" {
		m.unindexTombLocked(s, off, tb.alias)
	}
}

// unindexTombLocked takes the tombstone at off of s out of key's index
// entry.
func (m *Master) unindexTombLocked(s *segment, off uint64, key string) {
	e := m.tombIdx[key]
	if e == nil {
		return
	}
	e.at = slices.DeleteFunc(e.at, func(l tombLoc) bool { return l.seg == s && l.off == off })
	if len(e.at) == 0 {
		delete(m.tombIdx, key)
		return
	}
	e.seq = 0
	for _, l := range e.at {
		if tb, ok := l.seg.tombs[l.off]; ok {
			e.seq = max(e.seq, tb.seq)
		}
	}
}

// tombSeqLocked is the highest sequence number among key's tombstones (0
// when it has none).
func (m *Master) tombSeqLocked(key string) uint64 {
	if e := m.tombIdx[key]; e != nil {
		return e.seq
	}
	return 0
}

func (s *segment) ref(off uint64, tb tomb) HeaderRef {
	return HeaderRef{Segment: s.spec.Name, Endpoint: s.spec.Endpoint, Offset: off, Addr: s.spec.Base + off, Seq: tb.seq, Offload: tb.off}
}

// Heartbeat is Ping for a client that owns durable segments: zeroed lists
// the tombstones it zeroed since its last heartbeat (their space is
// released), and the answer lists the tombstones on its segments still to
// zero.
//
// The sign of life is recorded first, without mu (Ping), so a heartbeat
// that then waits for the core's lock has already kept its client alive.
// The zeroed tombstones are taken back heartbeatPart at a time, one hold of
// the lock each: a node reports up to maxTombsPerPing at once, and taking
// them all in one hold kept every put and get waiting for milliseconds.
func (m *Master) Heartbeat(clientID string, zeroed []HeaderRef) (viewVersion uint64, st PingStatus, todo []HeaderRef) {
	if _, st := m.Ping(clientID); st != PingOK {
		return m.viewVersion, st, nil
	}
	for len(zeroed) > heartbeatPart {
		m.mu.Lock()
		c := m.clients[clientID]
		if c == nil {
			m.mu.Unlock()
			return m.viewVersion, PingNeedRemount, nil
		}
		m.zeroedLocked(c, zeroed[:heartbeatPart])
		m.mu.Unlock()
		zeroed = zeroed[heartbeatPart:]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clients[clientID]
	if c == nil {
		return m.viewVersion, PingNeedRemount, nil
	}
	m.zeroedLocked(c, zeroed)
	now := m.clock.Now()
	n := 0
	for _, s := range c.segments {
		s.releaseFencedLocked(now)
		n += len(s.tombs)
	}
	if n == 0 {
		return m.viewVersion, PingOK, nil
	}
	todo = make([]HeaderRef, 0, min(n, maxTombsPerPing)) // no growth: an answer is up to 1.3 MB of refs
	for _, s := range c.segments {
		for off, tb := range s.tombs {
			if len(todo) >= maxTombsPerPing {
				return m.viewVersion, PingOK, todo
			}
			todo = append(todo, s.ref(off, tb))
		}
	}
	return m.viewVersion, PingOK, todo
}

// heartbeatPart is how many zeroed tombstones a heartbeat takes back per
// hold of the lock (about a millisecond's work at most).
const heartbeatPart = 512

// zeroedLocked takes back the tombstones of c's segments that its node
// zeroed: their space is freed (or fenced, when a remover may still write
// there).
func (m *Master) zeroedLocked(c *client, zeroed []HeaderRef) {
	now := m.clock.Now()
	for _, z := range zeroed {
		s := c.segments[z.Segment]
		if s == nil {
			continue
		}
		if tb, ok := s.tombs[z.Offset]; ok && tb.seq == z.Seq {
			if tb.n == 0 { // held: the bytes are a revoked slot's (slot.go)
				if !tb.fencedAt(now) { // else named again at the next heartbeat, until the fence ends
					m.dropTombLocked(s, z.Offset)
				}
				continue
			}
			n := tb.n
			if m.cfg.Scrub && n > m.cfg.Align { // an offload tombstone: the header is zero, the value is not
				m.releaseLocked(s, z.Offset+m.cfg.Align, n-m.cfg.Align, ownerOf(tb.key), tb.hold)
				n = m.cfg.Align
			}
			fenced := tb.fencedAt(now)
			if m.cfg.Scrub && tb.hold > nanoOf(now) && (!fenced || tb.hold > tb.named+nanotime(objheader.ZeroFence)) {
				// a put's write grant covers the header past any fence
				m.releaseLocked(s, z.Offset, n, ownerOf(tb.key), tb.hold)
			} else if fenced { // a remover may still write zeros there
				s.fenced = append(s.fenced, fencedTomb{off: z.Offset, n: n, until: tb.named + nanotime(objheader.ZeroFence)})
			} else {
				s.alloc.Free(z.Offset, n)
			}
			m.dropTombLocked(s, z.Offset)
		}
	}
}

// tombsOfLocked lists the tombstones of the given keys (the removed
// object's headers and those of older versions not zeroed yet) for the
// calling client to zero: each is fenced (see fencedTomb) from now.
// O(keys), whatever the number of tombstones.
func (m *Master) tombsOfLocked(keys map[string]bool) []HeaderRef {
	var out []HeaderRef
	now := nanoOf(m.clock.Now())
	for k := range keys {
		if e := m.tombIdx[k]; e != nil {
			for _, l := range e.at {
				tb := l.seg.tombs[l.off]
				tb.named = now
				l.seg.tombs[l.off] = tb
				out = append(out, l.seg.ref(l.off, tb))
			}
		}
	}
	return out
}

// fencedTomb is a tombstone the node zeroed while a client it was named to
// may still write zeros over it: a remover's write is blind (a transfer
// cannot compare before it writes), so were the bytes handed out again, a
// late one would zero the header of the object placed there, and that
// object would not be re-reported after a master restart. Its bytes stay
// allocated until objheader.ZeroFence after it was named (a remover gives
// its write up after objheader.ZeroWithin).
type fencedTomb struct {
	off, n uint64
	until  nanotime
}

// fencedAt reports whether tb was named to a client to zero within
// objheader.ZeroFence before now.
func (tb tomb) fencedAt(now time.Time) bool {
	return tb.named != 0 && tb.named+nanotime(objheader.ZeroFence) > nanoOf(now)
}

// releaseFencedLocked frees the fenced tombstones of s whose fence ended
// by now, oldest first (a later fence ahead of an earlier one only delays
// it). O(tombstones freed).
func (s *segment) releaseFencedLocked(now time.Time) {
	n, t := 0, nanoOf(now)
	for n < len(s.fenced) && s.fenced[n].until <= t {
		s.alloc.Free(s.fenced[n].off, s.fenced[n].n)
		n++
	}
	if s.fenced = s.fenced[n:]; len(s.fenced) == 0 {
		s.fenced = nil // the array goes with its last entry
	}
}

// Tombstones lists every tombstone (tests, admin).
func (m *Master) Tombstones() []HeaderRef {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []HeaderRef
	for _, s := range m.segOrder {
		for off, tb := range s.tombs {
			out = append(out, s.ref(off, tb))
		}
	}
	return out
}

// maxTombTries bounds the tombstones of one segment that reuseTombLocked
// looks at.
const maxTombTries = 4096

// reuseTombLocked places one replica of size bytes over a header
// tombstone and the free bytes after it, when a put needs room at once and
// the freed objects' 64-byte tombstones fragment the space (objects of one
// size: each freed object is 64 bytes short of its successor's size). The
// new object starts at the tombstone's offset, so its own header overwrites
// the dead one (and the tombstone is no longer needed).
func (m *Master) reuseTombLocked(clientID string, size uint64) []place {
	if m.cfg.Scrub { // a tombstone holds a dead header: not zero
		return nil
	}
	now := m.clock.Now()
	for _, s := range m.orderLocked(clientID) {
		if s.draining {
			continue
		}
		need, tries := s.alloc.Rounded(size), 0
		for off, tb := range s.tombs {
			if tries++; tries > maxTombTries {
				break
			}
			if tb.n == 0 || tb.off || tb.fencedAt(now) || tb.n+s.alloc.FreeAt(off+tb.n) < need {
				continue
			}
			s.alloc.Free(off, tb.n)
			if !s.alloc.AllocAt(off, size) {
				panic(fmt.Sprintf("master: tombstone at %d of %s could not be reused", off, s.spec.Name))
			}
			m.dropTombLocked(s, off)
			return []place{{seg: s, off: off}}
		}
	}
	return nil
}
