package master

import (
	"container/heap"
	"slices"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/tenant"
)

// Scrubbing freed extents (Config.Scrub). With data-path grants a reader
// is granted exactly the extent of an object; were that extent handed out
// with what an earlier object left in it, a writer that ends its put
// without writing (or writing part of it) would be granted the earlier
// object's bytes: another tenant's removed or evicted data. So under
// Scrub an extent that held bytes goes to its segment's dirty set when it
// is freed, not to the allocator; the node's ping answers name dirty
// extents (Scrub), the node zeroes them and reports them in a later ping,
// and only then are they free. The invariant: a free byte of a segment is
// zero (a segment's memory is zero when first mounted, as memory from the
// kernel is; a remount's, and a restore's space between and past the
// objects it restored, is dirty).
//
// A dirty extent remembers its owner: the tenant whose key's object held
// it. A put of that tenant takes one of its own dirty extents of exactly
// its size at once, before free space (reuseDirtyLocked; a put of one
// replica and no preferred segments, else after free space): a tenant may
// read its own bytes, so only a change of owner waits for zeroing, a
// tenant that evicts or replaces its own objects (the common case under
// quotas and the tenant watermark) never waits, and it leaves the zeroed
// space to the others. Extents of no known
// owner (a restore's gaps, a remount) and put slots (whose key comes
// later) take only zeroed space.
//
// An extent with an owner is named for zeroing only once it has been dirty
// for scrubAge: until then its owner's puts may take it back unzeroed.
//
// Dirty bytes count as free for the watermark (usageLocked): they come
// back without evicting anything, so the evictor does not chase them. A
// put that finds no room of its own while enough bytes are dirty fails as
// on a full pool (ErrNoSpace, retried by its caller) without evicting
// for it; the node pings again scrubRepoll after it zeroed an answer's
// extents while answers bring more, so the lag is a round trip and the
// zeroing, not a ping interval.
//
// A grant outlives its object: the master signs a put's WRITE grant, on
// its header and value, for up to PutTimeout (masterserver), a reader's
// READ grant to the end of its read lease (which a forced removal does not
// wait for), and a node honours either until it expires whatever became of
// the object. So an extent freed while a grant on it may still be honoured
// (grantHoldLocked: the object was placed, or last rewritten, less than
// PutTimeout ago, or its read lease has not ended, with grantClockSlack)
// is held: not named for zeroing, so reused by no other tenant, before
// that grant ends; its owner may take it back as before. Held bytes are
// no reason for another tenant's put to wait (scrubbingLocked leaves them
// out): it evicts instead. A freed durable
// object's header, zeroed as a tombstone, is held the same way when no
// remover's fence already outlasts the grant.
//
// Not dirtied: a put slot reused by the next version of its key (the same
// key is the same tenant's), and space allocated and given back within
// one call without a grant having left the master (a task's targets when
// the task cannot start).

// ScrubRef is a dirty extent: the node zeroes [Offset, Offset+Length) of
// its segment Segment and reports it back.
type ScrubRef struct {
	Segment        string
	Offset, Length uint64
}

// dirtyExt is a dirty extent's rounded length and owner.
//
// An extent waits until until, in its segment's queue (segment.aging:
// scrubAge after the free, so in the order of freeing) or, held, in its
// heap (segment.held, by the end of the hold); then it is ready
// (segment.ready, with its length): the set ping answers name from, so an
// answer costs what it names, however many extents wait. Waits that ended
// are settled at most settlePart per hold of the lock (settleHeldLocked),
// so a million extents freed at once come ready over a few hundred pings,
// each hold of the lock short. A ready extent may be named, and the node
// may zero it any time from then on, so its owner no longer takes it (it
// leaves the owners' index, segment.dirtyFit, when it becomes ready).
type dirtyExt struct {
	n     uint64
	until nanotime // not named for zeroing before
	owner string
	held  bool // until is a grant's end (grantHoldLocked), counted in segment.heldBytes
	ready bool // in segment.ready
}

// heldRef is a waiting dirty extent in its segment's heap, by until.
type heldRef struct {
	until nanotime
	off   uint64
}

// dirtyFit indexes dirty extents by owner and rounded length.
type dirtyFit struct {
	owner string
	n     uint64
}

// noOwner owns dirty extents no put may take before they are zeroed (no
// tenant name starts with a NUL).
const noOwner = "\x00"

// Scrub bounds: extents and bytes one ping answer names (the node zeroes a
// gigabyte in about 0.1 s; a remount's whole segment is one extent and
// goes alone).
const (
	maxScrubPerPing      = 4096
	maxScrubBytesPerPing = 1 << 30
	// scrubPart is how many reported extents one hold of the lock takes
	// back.
	scrubPart = 512
	// scrubAge is how long an extent with an owner stays dirty before it
	// is named for zeroing: a tenant replacing or evicting its own objects
	// at a steady rate takes its freed space back at once, unzeroed.
	scrubAge = 50 * time.Millisecond
)

// ownerOf is the owner of the space of key's object: its tenant's name
// ("" for the raw key space), noOwner for a put slot (whose bytes may be
// of whichever key its client wrote there).
func ownerOf(key string) string {
	if strings.HasPrefix(key, SlotPrefix) {
		return noOwner
	}
	t, _ := tenant.Split(key)
	return t
}

// grantHoldLocked is until when a grant the master signed for o's
// extents may be honoured (under Scrub; 0 otherwise): a put's WRITE grant,
// signed when its extents were placed (o.created, which a slot's commit
// and an in-place rewrite move on), lives at most PutTimeout; a reader's
// READ grant at most to the end of the read lease (which only a forced
// removal cuts short); and a node's clock may lag the master's by up to
// grantClockSlack.
func (m *Master) grantHoldLocked(o *object) nanotime {
	if !m.cfg.Scrub {
		return 0
	}
	return max(o.created+nanotime(m.cfg.PutTimeout), o.leaseUntil) + nanotime(grantClockSlack)
}

// remountHoldLocked is until when a grant on a remounted segment's memory
// that this master does not know (signed before it restarted, or before it
// dropped the segment's client) may be honoured: a WRITE grant PutTimeout,
// a READ grant a lease from now (under Scrub; 0 otherwise).
func (m *Master) remountHoldLocked() nanotime {
	if !m.cfg.Scrub {
		return 0
	}
	return nanoOf(m.clock.Now()) + nanotime(max(m.cfg.PutTimeout, m.cfg.LeaseTTL)+grantClockSlack)
}

// grantClockSlack is how far a node's clock may lag the master's for the
// write-grant hold (grantHoldLocked) to hold.
const grantClockSlack = time.Second

// releaseLocked gives back the n bytes at off of s that key's object held
// (noOwner: unknown): to the allocator, or under Scrub to s's dirty set,
// where it is not named for zeroing before hold (a write grant's end:
// grantHoldLocked; 0 for none).
func (m *Master) releaseLocked(s *segment, off, n uint64, owner string, hold nanotime) {
	if !m.cfg.Scrub || m.segments[s.key] != s {
		s.alloc.Free(off, n)
		return
	}
	n = s.alloc.Rounded(n)
	if n == 0 {
		return
	}
	if _, ok := s.dirty[off]; ok { // cannot happen: freed twice
		m.undirtyLocked(s, off)
	}
	if s.dirty == nil {
		s.dirty, s.dirtyFit = map[uint64]dirtyExt{}, map[dirtyFit]map[uint64]struct{}{}
	}
	now := nanoOf(m.clock.Now())
	budget := settleOnFree
	m.settleHeldLocked(s, now, &budget)
	until := now
	if owner != noOwner {
		until += nanotime(scrubAge)
	}
	d := dirtyExt{n: n, owner: owner, until: until}
	if hold > until {
		d.until, d.held = hold, true
		s.heldBytes += n
		m.tenantHeldLocked(owner, int64(n))
	}
	s.dirty[off] = d
	s.dirtyBytes += n
	if owner == noOwner && !d.held {
		d.ready = true
		s.dirty[off] = d
		s.readyLocked(off, n)
		return
	}
	if d.held {
		heap.Push(&s.held, heldRef{until: d.until, off: off})
	} else {
		s.aging = append(s.aging, heldRef{until: d.until, off: off})
	}
	if owner != noOwner {
		k := dirtyFit{owner, n}
		set := s.dirtyFit[k]
		if set == nil {
			set = map[uint64]struct{}{}
			s.dirtyFit[k] = set
		}
		set[off] = struct{}{}
	}
}

// undirtyLocked takes the dirty extent at off out of s's dirty set (its
// space stays allocated).
func (m *Master) undirtyLocked(s *segment, off uint64) {
	d, ok := s.dirty[off]
	if !ok {
		return
	}
	delete(s.dirty, off)
	s.dirtyBytes -= d.n
	if d.held {
		s.heldBytes -= d.n
		m.tenantHeldLocked(d.owner, -int64(d.n))
	}
	if d.ready {
		delete(s.ready, off)
	} else {
		s.unfitLocked(off, d)
	}
	if len(s.dirty) == 0 {
		s.dirty, s.dirtyFit, s.ready = nil, nil, nil // the maps' buckets go with their last entries
		s.held, s.aging, s.agingHead = nil, nil, 0   // every entry left is stale
	}
}

// readyLocked adds the n bytes at off to s's ready set.
func (s *segment) readyLocked(off, n uint64) {
	if s.ready == nil {
		s.ready = map[uint64]uint64{}
	}
	s.ready[off] = n
}

// settlePart bounds the ended waits one hold of the lock settles (well
// under a millisecond's work): settleAllHeldLocked's callers settle that
// many, a ping's Scrub that many per hold up to maxScrubPerPing.
const settlePart = 512

// settleOnFree is how many ended waits each free settles: more than the
// one entry it adds, so the queue and heap drain as fast as frees fill
// them even when no ping settles (an owner taking its extents back leaves
// their entries stale, to be dropped here).
const settleOnFree = 2

// settleHeldLocked makes up to *budget dirty extents of s whose wait
// ended by now ready, ending their holds, and takes them off *budget
// (queue and heap entries whose extent left the dirty set, or came back
// with another wait, are stale and dropped, and count too). O(*budget).
func (m *Master) settleHeldLocked(s *segment, now nanotime, budget *int) {
	for *budget > 0 && s.agingHead < len(s.aging) && s.aging[s.agingHead].until <= now {
		h := s.aging[s.agingHead]
		s.agingHead++
		*budget--
		m.endWaitLocked(s, h)
	}
	if s.agingHead == len(s.aging) {
		s.aging, s.agingHead = s.aging[:0], 0
	} else if s.agingHead > len(s.aging)/2 { // the queue's array is reused, not grown forever
		s.aging = s.aging[:copy(s.aging, s.aging[s.agingHead:])]
		s.agingHead = 0
	}
	for *budget > 0 && len(s.held) > 0 && s.held[0].until <= now {
		*budget--
		m.endWaitLocked(s, heap.Pop(&s.held).(heldRef))
	}
	if len(s.held) == 0 {
		s.held = nil
	}
	if len(s.aging) == 0 {
		s.aging = nil
	}
}

// endWaitLocked makes the extent of the queue or heap entry h ready
// (nothing when h is stale).
func (m *Master) endWaitLocked(s *segment, h heldRef) {
	d, ok := s.dirty[h.off]
	if !ok || d.ready || d.until != h.until {
		return
	}
	if d.held {
		d.held = false
		s.heldBytes -= d.n
		m.tenantHeldLocked(d.owner, -int64(d.n))
	}
	d.ready = true
	s.dirty[h.off] = d
	s.unfitLocked(h.off, d)
	s.readyLocked(h.off, d.n)
}

// settleAllHeldLocked is settleHeldLocked for every segment, settlePart
// in all. O(segments + settlePart).
func (m *Master) settleAllHeldLocked() {
	if !m.cfg.Scrub {
		return
	}
	now, budget := nanoOf(m.clock.Now()), settlePart
	for _, s := range m.segOrder {
		m.settleHeldLocked(s, now, &budget)
	}
}

// heldHeap orders held dirty extents by the end of their hold.
type heldHeap []heldRef

func (h heldHeap) Len() int           { return len(h) }
func (h heldHeap) Less(i, j int) bool { return h[i].until < h[j].until }
func (h heldHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)        { *h = append(*h, x.(heldRef)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// unfitLocked takes the dirty extent d at off out of the owners' index.
func (s *segment) unfitLocked(off uint64, d dirtyExt) {
	k := dirtyFit{d.owner, d.n}
	if set := s.dirtyFit[k]; set != nil {
		delete(set, off)
		if len(set) == 0 {
			delete(s.dirtyFit, k)
		}
	}
}

// reuseDirtyLocked places one replica of size bytes for owner's put in a
// dirty extent owner's own objects left, of exactly that size, on the
// segments in the client's order: no zeroing needed, the bytes are the
// owner's.
func (m *Master) reuseDirtyLocked(clientID, owner string, size uint64) []place {
	if !m.cfg.Scrub || owner == noOwner {
		return nil
	}
	for _, s := range m.orderLocked(clientID) {
		if len(s.dirtyFit) == 0 || s.draining || m.evacuatingLocked(s) || m.restoringLocked(s) {
			continue
		}
		for off := range s.dirtyFit[dirtyFit{owner, s.alloc.Rounded(size)}] {
			m.undirtyLocked(s, off)
			return []place{{seg: s, off: off}}
		}
	}
	return nil
}

// Scrub takes back the extents of clientID's segments its node zeroed
// (freeing them) and names up to maxScrubPerPing dirty ones still to zero
// (named again in later answers until reported: the node takes an
// answer's extents only when it has none zeroed and unreported, so it
// never zeroes an extent after reporting it, when it may hold an object).
// A reported extent frees only when it is ready (an answer may have named
// it: a report of a held or aging one would cut its wait short) with that
// exact length (a late or repeated report frees nothing). The taking back goes scrubPart at
// a time, one hold of the lock each.
func (m *Master) Scrub(clientID string, zeroed []ScrubRef) (todo []ScrubRef) {
	if !m.cfg.Scrub {
		return nil
	}
	for {
		part := zeroed[:min(len(zeroed), scrubPart)]
		zeroed = zeroed[len(part):]
		m.mu.Lock()
		c := m.clients[clientID]
		if c == nil {
			m.mu.Unlock()
			return nil
		}
		for _, z := range part {
			s := c.segments[z.Segment]
			if s == nil {
				continue
			}
			if d, ok := s.dirty[z.Offset]; ok && d.ready && d.n == z.Length { // only what an answer may have named
				m.undirtyLocked(s, z.Offset)
				s.alloc.Free(z.Offset, z.Length)
			}
		}
		if len(zeroed) > 0 {
			m.mu.Unlock()
			continue
		}
		// Waits that ended come ready settlePart at a time, one hold of
		// the lock each, up to an answer's worth.
		now := nanoOf(m.clock.Now())
		for range maxScrubPerPing / settlePart {
			budget := settlePart
			for _, s := range c.segments {
				m.settleHeldLocked(s, now, &budget)
			}
			if budget > 0 {
				break
			}
			m.mu.Unlock()
			m.mu.Lock()
			if c = m.clients[clientID]; c == nil {
				m.mu.Unlock()
				return nil
			}
		}
		var bytes uint64
	segs:
		for _, s := range c.segments {
			for off, n := range s.ready {
				if len(todo) >= maxScrubPerPing || (len(todo) > 0 && bytes+n > maxScrubBytesPerPing) {
					break segs
				}
				todo = append(todo, ScrubRef{Segment: s.spec.Name, Offset: off, Length: n})
				bytes += n
			}
		}
		m.mu.Unlock()
		return todo
	}
}

// DirtyBytes is the bytes of the mounted segments waiting to be zeroed.
func (m *Master) DirtyBytes() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dirtyBytesLocked()
}

func (m *Master) dirtyBytesLocked() (n uint64) {
	for _, s := range m.segOrder {
		n += s.dirtyBytes
	}
	return n
}

// dirtyFreeLocked makes the free extent of s starting at off (if any)
// dirty under Scrub: memory a node held before this master knew its
// objects (a remount, the space past a restore's last object).
func (m *Master) dirtyFreeLocked(s *segment, off uint64) {
	if !m.cfg.Scrub || off >= s.alloc.Size() {
		return
	}
	if n := s.alloc.FreeAt(off); n > 0 && s.alloc.AllocAt(off, n) {
		m.releaseLocked(s, off, n, noOwner, m.remountHoldLocked())
	}
}

// scrubbingLocked reports whether a segment that takes new objects has at
// least size bytes waiting to be zeroed, not counting those a write grant
// holds (which come back only when it ends: a put evicts rather than wait
// for them). O(segments + settlePart).
func (m *Master) scrubbingLocked(size uint64) bool {
	if !m.cfg.Scrub {
		return false
	}
	m.settleAllHeldLocked()
	return slices.ContainsFunc(m.segOrder, func(s *segment) bool {
		return s.dirtyBytes-s.heldBytes >= s.alloc.Rounded(size) && !s.draining && !m.evacuatingLocked(s) && !m.restoringLocked(s)
	})
}
