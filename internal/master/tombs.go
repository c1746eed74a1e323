package master

import "fmt"

// Tombstones: freed durable objects whose header is not zeroed yet (see
// restore.go for why they exist). This file keeps them and their indexes.

// maxTombsPerPing bounds the tombstones one Heartbeat answer carries.
const maxTombsPerPing = 4096

// freeRangeLocked frees the n bytes at off in s. For a durable object
// (hdr > 0) the first Align bytes stay allocated as a tombstone.
func (m *Master) freeRangeLocked(s *segment, off, n uint64, key string, seq, hdr uint64) {
	if hdr == 0 || m.segments[s.key] != s {
		s.alloc.Free(off, n)
		return
	}
	q := m.cfg.Align
	toDisk := m.offload && s.spec.OffloadOnEvict && s.spec.DiskURL != ""
	if toDisk {
		q = s.alloc.Rounded(n) // the node copies the whole object to disk first
	}
	if rest := s.alloc.Rounded(n) - q; rest > 0 {
		s.alloc.Free(off+q, rest)
	}
	m.addTombLocked(s, off, tomb{key: key, seq: seq, n: q, off: toDisk})
}

// addTombLocked records the tombstone tb at offset off of s.
func (m *Master) addTombLocked(s *segment, off uint64, tb tomb) {
	s.tombs[off] = tb
	m.tombKeys[tb.key]++
	m.tombSeq[tb.key] = max(m.tombSeq[tb.key], tb.seq)
}

func (m *Master) untombKeyLocked(key string) {
	if m.tombKeys[key]--; m.tombKeys[key] <= 0 {
		delete(m.tombKeys, key)
		delete(m.tombSeq, key)
	}
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
func (m *Master) Heartbeat(clientID string, zeroed []HeaderRef) (viewVersion uint64, st PingStatus, todo []HeaderRef) {
	if _, st := m.Ping(clientID); st != PingOK {
		return m.viewVersion, st, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clients[clientID]
	if c == nil {
		return m.viewVersion, PingNeedRemount, nil
	}
	for _, z := range zeroed {
		s := c.segments[z.Segment]
		if s == nil {
			continue
		}
		if tb, ok := s.tombs[z.Offset]; ok && tb.seq == z.Seq {
			s.alloc.Free(z.Offset, tb.n)
			delete(s.tombs, z.Offset)
			m.untombKeyLocked(tb.key)
		}
	}
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

// tombsOfLocked lists the tombstones of the given keys (the removed
// object's headers and those of older versions not zeroed yet).
func (m *Master) tombsOfLocked(keys map[string]bool) []HeaderRef {
	want := false
	for k := range keys {
		if m.tombKeys[k] > 0 {
			want = true
			break
		}
	}
	if !want {
		return nil
	}
	var out []HeaderRef
	for _, s := range m.segOrder {
		for off, tb := range s.tombs {
			if keys[tb.key] {
				out = append(out, s.ref(off, tb))
			}
		}
	}
	return out
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

// reuseTombLocked places one replica of size bytes over a header
// tombstone and the free bytes after it, when a put needs room at once and
// the freed objects' 64-byte tombstones fragment the space (objects of one
// size: each freed object is 64 bytes short of its successor's size). The
// new object starts at the tombstone's offset, so its own header overwrites
// the dead one (and the tombstone is no longer needed).
func (m *Master) reuseTombLocked(clientID string, size uint64) []replica {
	for _, s := range m.orderLocked(clientID) {
		if s.draining {
			continue
		}
		need := s.alloc.Rounded(size)
		for off, tb := range s.tombs {
			if tb.off || tb.n+s.alloc.FreeAt(off+tb.n) < need {
				continue
			}
			s.alloc.Free(off, tb.n)
			if !s.alloc.AllocAt(off, size) {
				panic(fmt.Sprintf("master: tombstone at %d of %s could not be reused", off, s.spec.Name))
			}
			delete(s.tombs, off)
			m.untombKeyLocked(tb.key)
			return []replica{{seg: s, off: off}}
		}
	}
	return nil
}
