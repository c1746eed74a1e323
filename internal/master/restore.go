package master

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"
	"github.com/kvcache-go/mooncake/internal/offsetalloc"
)

// Durable metadata (Config.Durable).
//
// Every durable allocation starts with an objheader that the client writes
// with the value before PutEnd, so the storage node's memory describes the
// objects it holds. When a node remounts on a master that does not know it
// (a restart or a new HA leader) it scans its segment and reports what it
// found (Restore); the master rebuilds the segment's allocator and objects
// from the reports. Nothing is added to the put path's RPCs.
//
// A freed durable object must not come back: its header is zeroed before
// its first bytes can be reused. Freeing releases the value's bytes at once
// but keeps the header's first Align bytes allocated as a tombstone until
// the owning node reports (Heartbeat) that it zeroed them; Remove also
// returns the tombstones of the removed keys so that the removing client
// zeroes them itself before its remove returns.

// tomb is a freed durable object whose header is not yet known to be zeroed.
type tomb struct {
	key string
	seq uint64
	n   uint64 // bytes held: Align, or the whole object while it is offloaded
	off bool   // being copied to the node's disk tier before zeroing
}

// HeaderRef names the header of a durable object in a segment.
type HeaderRef struct {
	Segment  string
	Endpoint string // transfer engine segment holding the memory
	Offset   uint64 // offset of the header in the segment
	Addr     uint64 // remote address of the header (segment base + Offset)
	Seq      uint64
	Offload  bool // copy the object to the disk tier before zeroing
}

// HeldObject is an object a storage node found in its segment
// (objheader.Scan) and reports when it remounts.
type HeldObject struct {
	Segment    string
	Offset     uint64 // of its header in the segment
	Key        string
	Size       uint64
	CRC        uint32
	Seq        uint64
	HardPin    bool
	SoftPin    bool
	SoftPinTTL time.Duration
	Disk       bool // held by the node's disk tier (Offset unused)
}

// RestoreResult says what Restore did with the reported objects.
type RestoreResult struct {
	Restored   int         // replicas taken over
	Dropped    int         // reports refused (older versions, overlaps, removed keys, bad)
	Tombstones []HeaderRef // headers of refused objects the node must zero
}

func headerLen(key string) uint64 { return objheader.Len(key) }

// Restore is RemountSegments for a node that reports the durable objects it
// holds: segments the master does not know yet are mounted with their
// allocator rebuilt from the reports, and each reported object becomes a
// complete object (or one more replica of it), unless the master knows a
// newer version of the key (put or re-reported with a higher sequence
// number, or removed during the restore window), the report overlaps a
// newer object in the segment, or it is malformed. Refused reports whose
// header can be zeroed safely are returned as tombstones for the node to
// zero. Reports for a segment the master already knows are ignored (it
// already knows what lives there). Without Config.Durable it is
// RemountSegments.
func (m *Master) Restore(clientID string, specs []SegmentSpec, held []HeldObject) (RestoreResult, error) {
	if clientID == "" {
		return RestoreResult{}, fmt.Errorf("%w: empty client id", ErrInvalidParams)
	}
	bySeg := map[string][]HeldObject{}
	var onDisk []HeldObject
	for _, h := range held {
		if h.Disk {
			onDisk = append(onDisk, h)
			continue
		}
		bySeg[h.Segment] = append(bySeg[h.Segment], h)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	m.touchClient(clientID, now)
	var res RestoreResult
	for _, spec := range specs {
		if spec.Name == "" || spec.Endpoint == "" || spec.Size == 0 {
			return res, fmt.Errorf("%w: segment needs a name, an endpoint and a size", ErrInvalidParams)
		}
		old := m.clients[clientID].segments[spec.Name]
		known := old != nil && old.client == clientID && old.spec == spec
		if err := m.mountLocked(clientID, spec); err != nil {
			return res, err
		}
		if known || !m.cfg.Durable {
			continue
		}
		m.restoreSegmentLocked(m.clients[clientID].segments[spec.Name], bySeg[spec.Name], now, &res)
	}
	if m.cfg.Durable && len(onDisk) > 0 {
		rm, taken := m.diskSyncLocked(m.clients[clientID], onDisk, nil)
		for _, h := range rm { // delivered with the next ping
			if s := m.clients[clientID].segments[h.Segment]; s != nil {
				s.diskRemove = append(s.diskRemove, h)
			}
		}
		res.Restored += taken
		res.Dropped += len(onDisk) - taken
	}
	return res, nil
}

// restoreSegmentLocked takes over the objects reported for a freshly
// mounted, empty segment s.
func (m *Master) restoreSegmentLocked(s *segment, held []HeldObject, now time.Time, res *RestoreResult) {
	if len(held) == 0 {
		return
	}
	span := func(h HeldObject) uint64 { return s.alloc.Rounded(headerLen(h.Key) + h.Size) }
	var ok []HeldObject
	var losers []HeldObject
	for _, h := range held {
		end := h.Offset + headerLen(h.Key) + h.Size
		if m.checkKey(h.Key) != nil || h.Size == 0 || h.Offset%m.cfg.Align != 0 || end < h.Offset || end > s.alloc.Size() {
			res.Dropped++
			continue
		}
		m.seq = max(m.seq, h.Seq)
		ok = append(ok, h)
	}
	// Overlapping reports: the newer wins. In offset order, a report can
	// only overlap the last one kept.
	slices.SortFunc(ok, func(a, b HeldObject) int { return cmp.Compare(a.Offset, b.Offset) })
	var kept []HeldObject
	for _, h := range ok {
		if n := len(kept); n > 0 && kept[n-1].Offset+span(kept[n-1]) > h.Offset {
			if h.Seq > kept[n-1].Seq {
				losers = append(losers, kept[n-1])
				kept[n-1] = h
			} else {
				losers = append(losers, h)
			}
			continue
		}
		kept = append(kept, h)
	}
	// Versions: newest first, against what the master knows.
	slices.SortFunc(kept, func(a, b HeldObject) int { return cmp.Compare(b.Seq, a.Seq) })
	var won []HeldObject
	for _, h := range kept {
		o := m.objects[h.Key]
		switch {
		case m.removed[h.Key] >= h.Seq, m.evicted[h.Key] >= h.Seq:
			losers = append(losers, h)
			continue
		case o == nil:
		case !o.restored || !o.complete || o.seq > h.Seq:
			losers = append(losers, h) // a put on this master, or a newer version
			continue
		case o.seq == h.Seq:
			if o.size != h.Size || o.crc != h.CRC || slices.ContainsFunc(o.replicas, func(r replica) bool { return r.seg == s }) {
				losers = append(losers, h)
				continue
			}
			o.replicas = append(o.replicas, replica{seg: s, off: h.Offset})
			m.replicasChangedLocked(o, 1)
			s.add(o)
			won = append(won, h)
			continue
		default: // the master knows an older version: this one replaces it
			m.freeLocked(o)
		}
		o = &object{key: h.Key, size: h.Size, crc: h.CRC, complete: true, replicas: []replica{{seg: s, off: h.Offset}},
			created: nanoOf(now), lastAccess: nanoOf(now), hardPin: h.HardPin, seq: h.Seq, hdr: uint32(headerLen(h.Key)), restored: true}
		if h.SoftPin {
			o.softPinUntil = nanoOf(now.Add(cmp.Or(min(h.SoftPinTTL, m.cfg.MaxSoftPinTTL), m.cfg.SoftPinTTL)))
		}
		m.objects[h.Key] = o
		s.add(o)
		m.storedLocked(o)
		won = append(won, h)
	}
	// The allocator: the winners' bytes, plus the first Align bytes of each
	// refused report that lies in free space, kept as a tombstone until the
	// node has zeroed it.
	used := make([]offsetalloc.Range, 0, len(won)+len(losers))
	for _, h := range won {
		used = append(used, offsetalloc.Range{Off: h.Offset, Len: span(h)})
	}
	slices.SortFunc(used, func(a, b offsetalloc.Range) int { return cmp.Compare(a.Off, b.Off) })
	inUse := func(off uint64) bool {
		i, _ := slices.BinarySearchFunc(used, off, func(r offsetalloc.Range, o uint64) int { return cmp.Compare(r.Off, o) })
		if i < len(used) && used[i].Off < off+m.cfg.Align {
			return true
		}
		return i > 0 && used[i-1].Off+used[i-1].Len > off
	}
	ranges := slices.Clone(used)
	quarantined := map[uint64]bool{}
	for _, h := range losers {
		res.Dropped++
		if inUse(h.Offset) || quarantined[h.Offset] {
			continue // inside a live object: its bytes are that object's
		}
		quarantined[h.Offset] = true
		ranges = append(ranges, offsetalloc.Range{Off: h.Offset, Len: m.cfg.Align})
		m.addTombLocked(s, h.Offset, tomb{key: h.Key, seq: h.Seq, n: m.cfg.Align})
		res.Tombstones = append(res.Tombstones, s.ref(h.Offset, s.tombs[h.Offset]))
	}
	a, err := offsetalloc.NewAllocated(s.spec.Size, m.cfg.Align, ranges)
	if err != nil { // cannot happen: the ranges were checked above
		panic(fmt.Sprintf("master: restore %s: %v", s.spec.Name, err))
	}
	s.alloc = a
	res.Restored += len(won)
}
