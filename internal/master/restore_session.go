package master

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"
)

// Restore sessions: a remount's reports in chunks (see restore.go).
//
// A session belongs to one client and lives from RestoreBegin to
// RestoreEnd. Between calls it keeps O(1) state per segment (a cursor: the
// last decided offset, the last kept report and the refused reports that
// still overlap it), never the reports themselves. A session with no call
// for ClientTTL expires, and a new RestoreBegin of its client replaces it:
// either way the segments it left half restored are dropped (unmounted,
// their objects forgotten without counting as removed), so that the next
// remount finds them unknown and restores them from the start. Expiry is
// checked at each restore call; a client that died mid-restore is also
// dropped, with its segments, once silent for ClientTTL (Tick), as any.

// RestoreChunkObjects is how many reports the master decides under one
// hold of its lock: a larger chunk (or a whole remount in one message) is
// decided in parts of this size. Deciding a report is a few map operations
// (about 2 µs), so a part holds the lock for under 10 ms.
const RestoreChunkObjects = 4096

// RestoreWindow is how many chunks past the one being decided a session
// takes: a client may have that many calls in flight, so that the next
// chunks travel and are decoded while the master decides one. A chunk that
// arrives early waits for its turn (the chunks before it decided); one
// further ahead is refused. A waiting chunk holds its reports (a bounded
// message each), not the lock.
const RestoreWindow = 8

// lastRestorePart is when (Unix nanoseconds, of the Master's clock) any
// Master of the process last decided a part of a restore: RestoreRunning.
var lastRestorePart atomic.Int64

// RestoreRunning reports whether a restore decided a part within the
// second before now, in any Master of the process: a process's GC setting
// (the master command's tuner) gives the garbage of a restore's decoded
// reports more room while one runs.
func RestoreRunning(now time.Time) bool {
	return now.UnixNano()-lastRestorePart.Load() < int64(time.Second)
}

// touchGroup is how many reports' hash slots a restore reads at once
// (objTable.touch) before deciding them: enough for the processor to
// overlap their misses, few enough that their lines and pages stay cached
// until each is looked up.
const touchGroup = 64

// restoreTable holds the restore sessions (one Master field).
type restoreTable struct {
	sessions map[string]*restoreSession // by client id
	segs     map[*segment]bool          // segments being restored: no placement on them
	lastID   uint64
}

// restoringLocked reports whether s is being restored: placement, copy
// and move targets and tombstone reuse leave it alone until the restore
// ends, since its undecided part still holds objects to come.
func (m *Master) restoringLocked(s *segment) bool {
	return len(m.restore.segs) > 0 && m.restore.segs[s]
}

type restoreSession struct {
	id       uint64
	client   string
	next     uint32 // the chunk number to take next: those below are taken (decided, or being decided if deciding)
	deciding bool   // chunk next-1 is being decided (the lock released between its parts)
	waiting  int    // calls waiting for their turn
	turn     chan struct{}
	expires  time.Time
	cursors  map[string]*restoreCursor // by segment name

	// For the log line of its end: when it began, the reports it took
	// and its time holding the lock to decide them; its time waiting for
	// the listing index's inserts (catchUp) and with no chunk to decide
	// (idle: from a chunk's decision to the next chunk's arrival, the
	// first chunk's from the session's beginning).
	began     time.Time
	reports   int
	restored  int
	held      time.Duration
	indexWait time.Duration
	idle      time.Duration
	decided   time.Time // when the last chunk's decision ended (began before the first)
}

// wake tells the calls waiting for their turn in sess that it changed
// (a chunk taken or decided, or the session dropped).
func (sess *restoreSession) wake() {
	close(sess.turn)
	sess.turn = make(chan struct{})
}

// restoreCursor is where the restore of one segment stands.
type restoreCursor struct {
	s   *segment
	pos uint64 // offsets below pos are decided; [pos, pos+Align) is allocated (a fence), the rest is free
	// apos is where the allocator's fence lies: [apos, pos) is decided,
	// its allocation deferred to the end of the part (restoreFlushLocked):
	// one allocator step for the part, and one per gap in it.
	apos     uint64
	gaps     [][2]uint64 // free ranges in [apos, pos), the allocator not told yet
	last     HeldObject  // kept report whose overlaps may not all be known yet (if hasLast)
	lastHash uint32      // keyHash of last.Key
	hasLast  bool
	losers   []HeldObject // refused reports at offsets >= pos, their tombstones not decided
	fresh    bool         // the segment's memory is new: its free space needs no scrubbing (scrub.go)
}

// errRestoreSession wraps the refusals of a restore call: no such session
// (it expired, was replaced, or began on another master) or a chunk out
// of order. The client remounts from the start.
var errRestoreSession = fmt.Errorf("%w: restore session", ErrInvalidParams)

// Restore is RemountSegments for a node that reports the durable objects it
// holds, all at once: RestoreBegin, RestoreChunk for each
// RestoreChunkObjects reports (sorted by segment and offset first) and
// RestoreEnd, each under its own hold of the lock. Segments the master
// does not know yet are mounted and restored from the reports; reports for
// a segment the master already knows are ignored (it already knows what
// lives there). Without Config.Durable it is RemountSegments.
func (m *Master) Restore(clientID string, specs []SegmentSpec, held []HeldObject) (RestoreResult, error) {
	id, err := m.RestoreBegin(clientID, specs)
	if err != nil {
		return RestoreResult{}, err
	}
	held = slices.Clone(held)
	sortHeld(held)
	var res RestoreResult
	for n := 0; n*RestoreChunkObjects < len(held); n++ {
		r, err := m.RestoreChunk(clientID, id, uint32(n), held[n*RestoreChunkObjects:min(len(held), (n+1)*RestoreChunkObjects)])
		res.add(r)
		if err != nil {
			return res, err
		}
	}
	r, err := m.RestoreEnd(clientID, id)
	res.add(r)
	return res, err
}

// sortHeld orders reports by segment and offset (disk copies last).
func sortHeld(held []HeldObject) {
	slices.SortStableFunc(held, func(a, b HeldObject) int {
		if a.Disk != b.Disk {
			if a.Disk {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Segment, b.Segment), cmp.Compare(a.Offset, b.Offset))
	})
}

// RestoreBegin opens a restore session for clientID and mounts specs as
// RemountSegments does; with Config.Durable, each segment the master did
// not know is restored from the session's reports. A session the client
// had open is dropped first. It returns the session's id.
func (m *Master) RestoreBegin(clientID string, specs []SegmentSpec) (uint64, error) {
	return m.RestoreBeginFresh(clientID, specs, false)
}

// RestoreBeginFresh is RestoreBegin; fresh says the segments' memory was
// allocated for this mount by a new process (zero, as memory from the
// kernel is), so under Config.Scrub nothing it holds outside the restored
// objects needs zeroing (a node starting with a disk tier mounts so).
func (m *Master) RestoreBeginFresh(clientID string, specs []SegmentSpec, fresh bool) (uint64, error) {
	if clientID == "" {
		return 0, fmt.Errorf("%w: empty client id", ErrInvalidParams)
	}
	for _, spec := range specs {
		if spec.Name == "" || spec.Endpoint == "" || spec.Size == 0 {
			return 0, fmt.Errorf("%w: segment needs a name, an endpoint and a size", ErrInvalidParams)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	m.expireRestoresLocked(now)
	if old := m.restore.sessions[clientID]; old != nil {
		m.abandonRestoreLocked(old, "replaced by a new remount")
	}
	m.touchClient(clientID, now)
	m.restore.lastID = max(m.restore.lastID+1, uint64(now.UnixNano())) // ids differ across master restarts
	sess := &restoreSession{id: m.restore.lastID, client: clientID, expires: now.Add(m.cfg.ClientTTL), cursors: map[string]*restoreCursor{},
		turn: make(chan struct{}), began: now, decided: now}
	if m.restore.sessions == nil {
		m.restore.sessions, m.restore.segs = map[string]*restoreSession{}, map[*segment]bool{}
	}
	m.restore.sessions[clientID] = sess
	for _, spec := range specs {
		old := m.clients[clientID].segments[spec.Name]
		known := old != nil && old.client == clientID && old.spec == spec
		if err := m.mountLocked(clientID, spec); err != nil {
			m.abandonRestoreLocked(sess, "mount refused")
			return 0, err
		}
		s := m.clients[clientID].segments[spec.Name]
		if known {
			continue
		}
		if !m.cfg.Durable {
			if !fresh {
				m.dirtyFreeLocked(s, 0) // a remount: the memory holds what the objects the master forgot left
			}
			continue
		}
		if !s.alloc.AllocAt(0, m.cfg.Align) { // cannot happen: the segment was just mounted, empty
			panic(fmt.Sprintf("master: restore %s: new segment not empty", spec.Name))
		}
		sess.cursors[spec.Name] = &restoreCursor{s: s, fresh: fresh}
		m.restore.segs[s] = true
	}
	return sess.id, nil
}

// RestoreExpect tells session id how many reports it will carry in all (a
// hint, bounded by what its segments can hold): when the master holds few
// objects yet, as after a restart, it sizes its object table for them
// once instead of growing it step by step while the reports arrive.
func (m *Master) RestoreExpect(clientID string, id uint64, objects uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess, err := m.sessionLocked(clientID, id, m.clock.Now())
	if err != nil {
		return err
	}
	var room, bytes uint64 // the most objects the session's segments can hold: 2 x Align bytes at least each
	for _, cur := range sess.cursors {
		room += cur.s.alloc.Size() / (2 * m.cfg.Align)
		bytes += cur.s.alloc.Size()
	}
	m.reserveObjectsLocked(int(min(objects, room)))
	// Each segment's list of its objects, sized once for its share of
	// them (by size), instead of grown by copies while the reports arrive.
	for _, cur := range sess.cursors {
		s := cur.s
		share := min(objects, room) * s.alloc.Size() / max(bytes, 1)
		if share > RestoreChunkObjects && len(s.objects) <= RestoreChunkObjects && uint64(cap(s.objects)) < share {
			s.objects = slices.Grow(s.objects, int(share)-len(s.objects))
		}
	}
	return nil
}

// reserveObjectsLocked sizes the object table for n more objects when it
// holds at most a part's worth (the copy is then O(part)).
func (m *Master) reserveObjectsLocked(n int) {
	if n <= RestoreChunkObjects || m.objects.len() > RestoreChunkObjects {
		return
	}
	m.objects.reserve(n)
}

// RestoreChunk decides chunk n (0, 1, ... in order) of session id's
// reports. Each segment's reports must come in offset order across the
// chunks (a chunk is sorted first; a report behind what earlier chunks
// decided is dropped). The reports are decided in parts of
// RestoreChunkObjects, each under its own hold of the lock. A chunk number
// already taken is answered with an empty result (a repeated call); a
// chunk up to RestoreWindow ahead of the next one waits until the chunks
// before it are decided; a session that is unknown, expired, replaced or
// given a chunk further ahead is refused with ErrInvalidParams and
// dropped. Disk copies (HeldObject.Disk) are recorded as DiskSync does.
// It is RestoreChunkContext with no end to the wait but the session's.
func (m *Master) RestoreChunk(clientID string, id uint64, n uint32, held []HeldObject) (RestoreResult, error) {
	return m.RestoreChunkContext(context.Background(), clientID, id, n, held)
}

// RestoreChunkContext is RestoreChunk whose wait for its turn also ends
// with ctx (a server passes its call's): a chunk given up drops the
// session, since the chunks after it cannot be decided either.
func (m *Master) RestoreChunkContext(ctx context.Context, clientID string, id uint64, n uint32, held []HeldObject) (RestoreResult, error) {
	mem, onDisk := splitHeld(held)
	// Before its turn, while another call decides: the keys' hashes in the
	// object table (so that a decision only looks them up, and reads their
	// slots at once: touch), and the table's memory for them (stock.go).
	hs := make([]uint32, len(mem))
	keyBytes := 0
	for i, h := range mem {
		hs[i] = keyHash(h.Key)
		keyBytes += len(h.Key)
	}
	m.stock.prepare(len(mem), keyBytes)
	sess, err := m.restoreTake(ctx, clientID, id, n)
	if sess == nil {
		return RestoreResult{}, err
	}
	var indexWait time.Duration
	defer func() { m.restoreDecided(sess, indexWait) }()
	var res RestoreResult
	for len(mem)+len(onDisk) > 0 {
		k := min(len(mem), RestoreChunkObjects)
		d := min(len(onDisk), RestoreChunkObjects-k)
		if m.index.backlog() > RestoreChunkObjects {
			t := m.clock.Now()
			m.index.catchUp() // the listing index's inserts run behind: wait for them, not holding the lock
			indexWait += m.clock.Now().Sub(t)
		}
		if err := m.restorePart(clientID, sess, mem[:k], hs[:k], onDisk[:d], &res); err != nil {
			return res, err
		}
		mem, hs, onDisk = mem[k:], hs[k:], onDisk[d:]
		runtime.Gosched() // a call waiting on the lock takes it before the next part (see listHold)
	}
	return res, nil
}

// splitHeld returns a chunk's memory reports sorted by segment and offset
// and its disk copies, outside the lock. A chunk of memory reports already
// in that order (a node sends its scan's order) is used as it is.
func splitHeld(held []HeldObject) (mem, onDisk []HeldObject) {
	cmpMem := func(a, b HeldObject) int {
		return cmp.Or(cmp.Compare(a.Segment, b.Segment), cmp.Compare(a.Offset, b.Offset))
	}
	if !slices.ContainsFunc(held, func(h HeldObject) bool { return h.Disk }) {
		if slices.IsSortedFunc(held, cmpMem) {
			return held, nil
		}
		mem = slices.Clone(held)
		slices.SortStableFunc(mem, cmpMem)
		return mem, nil
	}
	mem = make([]HeldObject, 0, len(held))
	for _, h := range held {
		if h.Disk {
			onDisk = append(onDisk, h)
		} else {
			mem = append(mem, h)
		}
	}
	slices.SortStableFunc(mem, cmpMem)
	return mem, onDisk
}

// restoreTake waits until chunk n is the next of session id to decide and
// takes it; it returns a nil session for a chunk already taken.
func (m *Master) restoreTake(ctx context.Context, clientID string, id uint64, n uint32) (*restoreSession, error) {
	for {
		sess, waiting, turn, err := m.restoreTry(clientID, id, n)
		if err != nil || waiting == nil {
			return sess, err
		}
		var why string
		select {
		case <-turn:
		case <-ctx.Done():
			why = fmt.Sprintf("chunk %d given up while waiting for its turn: %v", n, ctx.Err())
		}
		m.mu.Lock()
		waiting.waiting--
		if why != "" && m.restore.sessions[clientID] == waiting {
			m.abandonRestoreLocked(waiting, why)
		}
		m.mu.Unlock()
		if why == "" {
			continue
		}
		return nil, fmt.Errorf("%w %d of %q: %s", errRestoreSession, id, clientID, why)
	}
}

// restoreTry takes chunk n if its turn has come; otherwise it returns the
// session to wait on, counted waiting, and the channel closed at its next
// change of turn (nil: chunk n was taken already, or refused with err).
func (m *Master) restoreTry(clientID string, id uint64, n uint32) (taken, waiting *restoreSession, turn chan struct{}, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess, err := m.sessionLocked(clientID, id, m.clock.Now())
	if err != nil {
		return nil, nil, nil, err
	}
	switch {
	case n < sess.next:
		return nil, nil, nil, nil
	case n-sess.next >= RestoreWindow:
		m.abandonRestoreLocked(sess, fmt.Sprintf("chunk %d out of order, want %d", n, sess.next))
		return nil, nil, nil, fmt.Errorf("%w: chunk %d out of order, want %d", errRestoreSession, n, sess.next)
	case n > sess.next || sess.deciding:
		sess.waiting++
		return nil, sess, sess.turn, nil
	}
	sess.next++
	sess.deciding = true
	sess.idle += m.clock.Now().Sub(sess.decided)
	sess.wake()
	return sess, nil, nil, nil
}

// restoreDecided ends the decision of the chunk sess took last, which
// waited indexWait for the listing index.
func (m *Master) restoreDecided(sess *restoreSession, indexWait time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess.deciding = false
	sess.indexWait += indexWait
	sess.decided = m.clock.Now()
	sess.wake()
}

// restorePart decides up to RestoreChunkObjects reports of sess under one
// hold of the lock; hs are the keyHash of mem's keys.
func (m *Master) restorePart(clientID string, sess *restoreSession, mem []HeldObject, hs []uint32, onDisk []HeldObject, res *RestoreResult) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.restore.sessions[clientID] != sess {
		return fmt.Errorf("%w %d of %q: dropped during the call", errRestoreSession, sess.id, clientID)
	}
	now := m.clock.Now()
	lastRestorePart.Store(now.UnixNano())
	defer m.index.flush() // the part's objects listed by the index's goroutine, while the next part is decided
	defer m.restoreFlushAllLocked(sess)
	restored := res.Restored
	defer func() {
		sess.held += m.clock.Now().Sub(now)
		sess.reports += len(mem) + len(onDisk)
		sess.restored += res.Restored - restored
	}()
	// The reports come sorted by segment: the cursor is looked up (and
	// checked still mounted: nothing unmounts during the part's hold) once
	// per run of one segment's reports, not per report.
	var seg string
	var cur *restoreCursor
	for i, h := range mem {
		if i%touchGroup == 0 { // the next group's slots, read together while they stay cached
			m.objects.touch(hs[i:min(len(hs), i+touchGroup)])
		}
		if i == 0 || h.Segment != seg {
			seg, cur = h.Segment, sess.cursors[h.Segment]
			if cur != nil && m.segments[cur.s.key] != cur.s { // unmounted meanwhile
				delete(sess.cursors, h.Segment)
				delete(m.restore.segs, cur.s)
				cur = nil
			}
		}
		if cur == nil {
			continue // a segment the master knew, not the client's, or unmounted
		}
		m.restoreStepLocked(cur, sess, h, hs[i], now, res)
	}
	if m.cfg.Durable && len(onDisk) > 0 {
		m.restoreFlushAllLocked(sess) // what DiskSync frees is allocated
		c := m.clients[clientID]
		rm, taken := m.diskSyncLocked(c, onDisk, nil)
		for _, h := range rm { // delivered with the next ping
			if s := c.segments[h.Segment]; s != nil {
				s.diskRemove = append(s.diskRemove, h)
			}
		}
		res.Restored += taken
		res.Dropped += len(onDisk) - taken
	}
	return nil
}

// RestoreEnd closes session id: the last kept reports are decided and the
// space past them is freed. A chunk still being decided (a repeated last
// call) is waited for.
func (m *Master) RestoreEnd(clientID string, id uint64) (RestoreResult, error) {
	return m.RestoreEndContext(context.Background(), clientID, id)
}

// RestoreEndContext is RestoreEnd whose wait for a chunk being decided
// also ends with ctx.
func (m *Master) RestoreEndContext(ctx context.Context, clientID string, id uint64) (RestoreResult, error) {
	for {
		res, turn, err := m.restoreEndTry(clientID, id)
		if turn == nil {
			return res, err
		}
		select {
		case <-turn:
		case <-ctx.Done():
			return RestoreResult{}, fmt.Errorf("%w %d of %q: end given up while a chunk was decided: %v", errRestoreSession, id, clientID, ctx.Err())
		}
	}
}

func (m *Master) restoreEndTry(clientID string, id uint64) (RestoreResult, chan struct{}, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	sess, err := m.sessionLocked(clientID, id, now)
	if err != nil {
		return RestoreResult{}, nil, err
	}
	if sess.deciding {
		return RestoreResult{}, sess.turn, nil
	}
	var res RestoreResult
	for _, cur := range sess.cursors {
		if m.segments[cur.s.key] != cur.s {
			continue
		}
		m.settleLocked(cur, sess, ^uint64(0), now, &res)
		m.restoreFlushLocked(cur)
		if cur.pos < cur.s.alloc.Size() {
			if cur.fresh {
				cur.s.alloc.Free(cur.pos, m.cfg.Align) // the fence
			} else {
				m.releaseLocked(cur.s, cur.pos, m.cfg.Align, noOwner, m.remountHoldLocked())
				m.dirtyFreeLocked(cur.s, cur.pos+m.cfg.Align) // what the node's memory held past the last object
			}
		}
	}
	m.index.flush()
	m.dropSessionLocked(sess)
	sess.restored += res.Restored
	m.cfg.Logger.Info("master: restore session ended", "client", clientID, "segments", len(sess.cursors), "chunks", sess.next,
		"reports", sess.reports, "restored", sess.restored, "objects", m.objects.len(),
		"took", now.Sub(sess.began).Round(time.Millisecond), "decide", sess.held.Round(time.Millisecond),
		"index_wait", sess.indexWait.Round(time.Millisecond), "idle", (sess.idle + now.Sub(sess.decided)).Round(time.Millisecond))
	return res, nil, nil
}

// sessionLocked is client's session id, live: its deadline is pushed back.
func (m *Master) sessionLocked(clientID string, id uint64, now time.Time) (*restoreSession, error) {
	m.expireRestoresLocked(now)
	sess := m.restore.sessions[clientID]
	if sess == nil || sess.id != id {
		m.cfg.Logger.Warn("master: restore call refused: no such session", "client", clientID, "session", id)
		return nil, fmt.Errorf("%w %d of %q: none (expired, replaced or begun on another master)", errRestoreSession, id, clientID)
	}
	sess.expires = now.Add(m.cfg.ClientTTL)
	m.touchClient(clientID, now)
	return sess, nil
}

// expireRestoresLocked drops the sessions past their deadline.
func (m *Master) expireRestoresLocked(now time.Time) {
	for _, sess := range m.restore.sessions {
		if now.After(sess.expires) {
			m.abandonRestoreLocked(sess, "expired")
		}
	}
}

// abandonRestoreLocked drops sess and the segments it left half restored:
// they are unmounted, and their restored objects are forgotten without
// being remembered as removed, so that the node's next remount brings them
// back. It costs O(objects restored so far) under the lock, as any unmount.
func (m *Master) abandonRestoreLocked(sess *restoreSession, reason string) {
	m.dropSessionLocked(sess)
	n := 0
	for _, cur := range sess.cursors {
		s := cur.s
		if m.segments[s.key] != s {
			continue
		}
		n++
		// unmountLocked remembers the keys it drops as removed during the
		// restore window: not these, which were only half restored.
		type prior struct {
			key string
			seq uint64
			had bool
		}
		var keep []prior
		for _, id := range s.objects {
			if o := m.objects.at(id); o.restored {
				key := m.keyOf(o)
				seq, had := m.removed[key]
				keep = append(keep, prior{key, seq, had})
			}
		}
		m.unmountLocked(s)
		for _, p := range keep {
			if p.had {
				m.removed[p.key] = p.seq
			} else {
				delete(m.removed, p.key)
			}
		}
	}
	m.cfg.Logger.Warn("master: restore session dropped", "client", sess.client, "session", sess.id, "reason", reason,
		"segments_unmounted", n, "chunks_applied", sess.next)
}

func (m *Master) dropSessionLocked(sess *restoreSession) {
	delete(m.restore.sessions, sess.client)
	if len(m.restore.sessions) == 0 {
		m.stock.drop()
	}
	sess.wake()
	for _, cur := range sess.cursors {
		delete(m.restore.segs, cur.s)
	}
}

// restoreStepLocked takes report h of cur's segment (in offset order);
// hash is keyHash(h.Key).
func (m *Master) restoreStepLocked(cur *restoreCursor, sess *restoreSession, h HeldObject, hash uint32, now time.Time, res *RestoreResult) {
	s := cur.s
	end := h.Offset + headerLen(h.Key) + h.Size
	if m.checkKey(h.Key) != nil || h.Size == 0 || h.Offset%m.cfg.Align != 0 || end < h.Offset || end > s.alloc.Size() ||
		h.Offset < cur.pos || (cur.hasLast && h.Offset < cur.last.Offset) {
		res.Dropped++ // malformed, outside the segment, or behind what is decided
		return
	}
	m.seq = max(m.seq, h.Seq)
	if cur.hasLast {
		if l := &cur.last; l.Offset+m.restoreSpan(s, *l) > h.Offset { // overlapping reports: the newer wins
			if h.Seq > l.Seq {
				cur.losers = append(cur.losers, *l)
				*l, cur.lastHash = h, hash
			} else {
				cur.losers = append(cur.losers, h)
			}
			return
		}
		m.settleLocked(cur, sess, h.Offset, now, res)
	}
	cur.last, cur.lastHash, cur.hasLast = h, hash, true
}

func (m *Master) restoreSpan(s *segment, h HeldObject) uint64 {
	return s.alloc.Rounded(headerLen(h.Key) + h.Size)
}

// settleLocked decides cur's last kept report (no later report can overlap
// it: the next one starts at before) and the refused reports before
// before, and allocates their bytes in offset order: the winner's object,
// and a tombstone for each refused header outside it.
func (m *Master) settleLocked(cur *restoreCursor, sess *restoreSession, before uint64, now time.Time, res *RestoreResult) {
	s := cur.s
	var won *HeldObject
	if cur.hasLast {
		h := &cur.last
		cur.hasLast = false
		if m.takeOverLocked(s, sess, *h, cur.lastHash, now, res) {
			won = h
			res.Restored++
		} else {
			cur.losers = append(cur.losers, *h)
		}
	}
	if len(cur.losers) == 0 { // the common case: one report, no overlap
		if won != nil {
			m.restoreTakeLocked(cur, won.Offset, m.restoreSpan(s, *won))
		}
		return
	}
	type item struct {
		off, n uint64
		tomb   *HeldObject
	}
	var items []item
	if won != nil {
		items = append(items, item{off: won.Offset, n: m.restoreSpan(s, *won)})
	}
	slices.SortStableFunc(cur.losers, func(a, b HeldObject) int { return cmp.Compare(a.Offset, b.Offset) })
	var carry []HeldObject
	prev := ^uint64(0)
	for i := range cur.losers {
		l := &cur.losers[i]
		if l.Offset >= before {
			carry = append(carry, *l) // may still lie inside a later winner
			continue
		}
		res.Dropped++
		if won != nil && l.Offset >= won.Offset && l.Offset < won.Offset+m.restoreSpan(s, *won) {
			continue // inside a live object: its bytes are that object's
		}
		if l.Offset == prev || l.Offset < cur.pos {
			continue
		}
		prev = l.Offset
		items = append(items, item{off: l.Offset, n: m.cfg.Align, tomb: l})
	}
	slices.SortFunc(items, func(a, b item) int { return cmp.Compare(a.off, b.off) })
	for _, it := range items {
		m.restoreTakeLocked(cur, it.off, it.n)
		if it.tomb != nil {
			m.addTombLocked(s, it.off, tomb{key: it.tomb.Key, seq: it.tomb.Seq, n: m.cfg.Align})
			res.Tombstones = append(res.Tombstones, s.ref(it.off, s.tombs[it.off]))
		}
	}
	cur.losers = carry
}

// restoreTakeLocked allocates [off, off+n) (aligned, at or past cur.pos)
// in cur's segment and moves the fence past it, in O(1): the free extent
// past the fence starts right after it (nothing else allocates on a
// segment being restored, and the fence keeps frees below it from merging
// with that extent). The allocator learns it later, with the part's
// other ranges (restoreFlushLocked), before anything else reads or frees
// that segment's space: the gap before off, if any, is remembered.
func (m *Master) restoreTakeLocked(cur *restoreCursor, off, n uint64) {
	if off > cur.pos {
		cur.gaps = append(cur.gaps, [2]uint64{cur.pos, off})
	}
	cur.pos = off + n
}

// restoreFlushLocked tells the allocator what was taken since the last
// flush: the bytes past the old fence up to the end of the new one
// ([apos, pos) decided, [pos, pos+Align) the fence) in one step, then the
// gaps between the ranges taken (the old fence with them) freed again.
func (m *Master) restoreFlushLocked(cur *restoreCursor) {
	if cur.apos == cur.pos {
		return
	}
	a, align := cur.s.alloc, m.cfg.Align
	ok := true
	if hi := min(cur.pos+align, a.Size()); hi > cur.apos+align {
		ok = a.AllocAt(cur.apos+align, hi-cur.apos-align)
	}
	if !ok { // cannot happen: see restoreTakeLocked
		panic(fmt.Sprintf("master: restore %s: [%d,%d) not free past the fence", cur.s.spec.Name, cur.apos, cur.pos))
	}
	for _, g := range cur.gaps {
		if cur.fresh {
			a.Free(g[0], g[1]-g[0])
		} else {
			m.releaseLocked(cur.s, g[0], g[1]-g[0], noOwner, m.remountHoldLocked()) // what removed objects left there
		}
	}
	cur.apos, cur.gaps = cur.pos, cur.gaps[:0]
}

// restoreFlushAllLocked flushes every segment of sess still mounted: at
// the end of each hold of the lock, and before a free during one.
func (m *Master) restoreFlushAllLocked(sess *restoreSession) {
	for _, cur := range sess.cursors {
		if m.segments[cur.s.key] == cur.s {
			m.restoreFlushLocked(cur)
		}
	}
}

// takeOverLocked makes report h of s an object, or one more replica of
// one, unless the master knows a newer version of its key or the key was
// removed; it reports whether it did.
func (m *Master) takeOverLocked(s *segment, sess *restoreSession, h HeldObject, hash uint32, now time.Time, res *RestoreResult) bool {
	o := m.objects.getHashed(h.Key, hash)
	switch {
	case m.removed[h.Key] >= h.Seq, m.evicted[h.Key] >= h.Seq:
		return false
	case o == nil:
	case !o.restored || !o.complete || o.seq > h.Seq:
		return false // a put on this master, or a newer version
	case o.seq == h.Seq:
		if o.size != h.Size || o.crc != h.CRC || slices.ContainsFunc(m.reps(o), func(r replica) bool { return r.seg == s.id }) || o.nrep == maxObjectReplicas {
			return false
		}
		m.objects.setReps(o, append(m.reps(o), replica{seg: s.id, off: h.Offset}))
		m.replicasChangedLocked(o, 1)
		m.segAdd(s, o)
		return true
	default: // the master knows an older version: this one replaces it
		m.restoreFlushAllLocked(sess) // its space is allocated before it is freed
		m.replaceRestoredLocked(o, sess, res)
	}
	o = m.objects.addHashed(h.Key, hash, object{size: h.Size, crc: h.CRC, complete: true,
		created: nanoOf(now), lastAccess: nanoOf(now), hardPin: h.HardPin, seq: h.Seq, hdr: uint32(headerLen(h.Key)), restored: true})
	m.objects.setRep(o, replica{seg: s.id, off: h.Offset})
	if h.SoftPin {
		o.softPinUntil = nanoOf(now.Add(cmp.Or(min(h.SoftPinTTL, m.cfg.MaxSoftPinTTL), m.cfg.SoftPinTTL)))
	}
	m.segAdd(s, o)
	m.countAtLocked(o, 1, now)
	m.emitStored(h.Key)
	m.index.stage(o.id) // listed at the end of the part (storedLocked lists at once)
	return true
}

// replaceRestoredLocked frees o, an older version of a key being restored.
// Its replicas that this session took over count as dropped after all, and
// their tombstones go back to the node with the call's answer.
func (m *Master) replaceRestoredLocked(o *object, sess *restoreSession, res *RestoreResult) {
	var ours []place
	for _, r := range m.reps(o) {
		if cur := sess.cursors[m.segOf(r).spec.Name]; cur != nil && cur.s == m.segOf(r) {
			ours = append(ours, place{seg: m.segOf(r), off: r.off})
		}
	}
	m.freeLocked(o)
	for _, r := range ours {
		res.Restored--
		res.Dropped++
		if tb, ok := r.seg.tombs[r.off]; ok {
			res.Tombstones = append(res.Tombstones, r.seg.ref(r.off, tb))
		}
	}
}
