package master

import (
	"cmp"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/google/btree"
)

// KeyInfo is one row of List.
type KeyInfo struct {
	Key      string
	Size     uint64
	Replicas int
}

// The listing index: the keys of the visible objects (complete, in memory)
// and of the disk-only copies, in key order, so that a page of a listing
// and each chunk of a bulk removal cost O(log n + page) under the lock
// whatever the number of objects. Unfinished puts and put slots are not in
// it. The objects' keys are B-trees of 32-bit items (no pointer per key)
// ordered by the keys in the object table's arena, one per key range
// (partition, index_parts.go: one until a restore's large batches of
// inserts cut the keys in ranges; a walk goes through them in key order,
// and a put or a removal finds its range by a binary search). An
// item is the record ID of its key's visible version, or, once the key was
// upserted, an entry (entryBit set): an entry names the record of the
// key's visible version (ent) and that record names its entry back
// (entOf). An upsert's new version takes over its key's entry in place
// (handOverIndexLocked): two writes, no search of the tree, since the key,
// and so the item's place, is the same; only a key's first upsert turns
// its item into an entry (one replace in the tree). Keys never upserted
// cost their item alone, and their comparisons read the record directly.
// The keys held only on a disk tier are a B-tree of strings. A walk merges
// the two.
//
// The index has its own lock (mu), so that the inserts of a restore run
// outside the Master's lock, on other cores, while the restore decides its
// next part. Lock order: Master.mu, then keyIndex.mu, then keyIndex.qmu.
//   - A restore decision (under Master.mu) does not insert its object: it
//     stages the record ID (staged, guarded by Master.mu). At the end of
//     the part the staged IDs move to the queue (qmu), and a goroutine
//     (drain) inserts the queue's IDs under mu alone, in order.
//   - Every other use of the index runs under Master.mu and takes mu
//     (acquire): it first inserts what is queued and staged, so that it
//     sees the trees as if every restore insert had been made in its
//     decision. A put, a removal or a listing of a key whose restore
//     insert is still queued therefore acts after that insert: a removed
//     key is never left listed, a live key never unlisted.
//   - drain reads records and arena bytes without Master.mu, and only while
//     something is queued: a queued or indexed record's key does not move
//     or change then (a record is freed only after it is taken out of the
//     index, which applies the queue first; a replacing commit rekeys its
//     record in the hold that handed it the entry, after an acquire, when
//     nothing is queued), and the object table takes mu (objTable.dirMu)
//     to grow its directories of chunks or to compact its keys. ent and
//     entOf are read and written under mu only.
//   - A large batch's inserts (insertParallel) run on several goroutines
//     while the one that holds mu (drain, or an acquire) waits for them:
//     each goroutine changes only the trees of the partitions it took, and
//     of ent and entOf only the places of the entries it takes out of them
//     (an entry is in one partition, its key's, and so are the records a
//     batch lists under that key); the free entries' list and the disk
//     tier's tree are changed by the holder of mu once they have joined.
type keyIndex struct {
	t *objTable

	mu sync.Mutex
	// parts are the items of the complete objects in memory (record IDs,
	// or entries with entryBit), a B-tree per key range (index_parts.go):
	// parts[i] holds the keys from bounds[i-1] to bounds[i] (excluded).
	parts   []*memPart
	bounds  []string
	nparts  int                      // the partitions a large batch's bounds cut (indexParts)
	partMin int                      // the smallest batch that chooses bounds or is inserted in parallel (indexPartMin)
	piece   int                      // the fewest keys of a batch a cut gives a partition (indexPiece)
	pinned  bool                     // the bounds stay as they are (tests)
	n       int                      // items in parts
	emptied int                      // partitions emptied by removals since empty ones were last dropped
	free    *btree.FreeListG[uint32] // the partitions' free nodes
	disk    *btree.BTreeG[string]    // keys held only on a disk tier
	workers int                      // goroutines inserting a large batch (0: indexWorkers())
	// A parallel insert's partition of each item, the items grouped by
	// partition, each partition's count, its work, and what each
	// goroutine leaves (kept for the next).
	route   []int32
	grouped []uint32
	counts  []int32
	work    []partWork
	results []partResult

	ent     idArray  // entry ID -> the record it lists (0: a free entry)
	entOf   idArray  // record ID -> its entry (0: none; when set, ent names it back)
	entNext uint32   // entry IDs handed out so far (IDs below it exist; 0 is never used)
	entFree []uint32 // free entry IDs

	// What a restore's decisions write (staged at each, the queue at each
	// part's end) lies in cache lines of its own, apart from what the
	// index's goroutines read at each insert.
	_      [64]byte
	staged []uint32 // restored objects of the part being decided: guarded by Master.mu

	qmu      sync.Mutex
	queue    []uint32 // restored objects to insert, in order
	spare    []uint32 // an emptied queue, for reuse
	draining bool     // a drain goroutine runs (it clears this when the queue is empty)
}

// idArray is a sparse array of 32-bit IDs in chunks that never move, made
// when first written: growing it copies nothing (a put's hold of the lock
// never copies an array of millions of objects), and only the ranges of
// IDs written take memory. An index never written reads 0.
type idArray struct{ chunks [][]uint32 }

const idChunkShift = 16

func (a *idArray) get(i uint32) uint32 {
	c := int(i >> idChunkShift)
	if c >= len(a.chunks) || a.chunks[c] == nil {
		return 0
	}
	return a.chunks[c][i&(1<<idChunkShift-1)]
}

func (a *idArray) set(i, v uint32) {
	c := int(i >> idChunkShift)
	if c >= len(a.chunks) {
		a.chunks = append(a.chunks, make([][]uint32, c+1-len(a.chunks))...)
	}
	if a.chunks[c] == nil {
		if v == 0 {
			return
		}
		a.chunks[c] = make([]uint32, 1<<idChunkShift)
	}
	a.chunks[c][i&(1<<idChunkShift-1)] = v
}

const (
	// entryBit marks an item of mem that is an entry (its ID below the
	// bit), not a record ID: record IDs stay below it (2^31 records of
	// 96 bytes, far past a master's memory).
	entryBit = 1 << 31
	// probeID is the item that stands for memPart.probe in a search of
	// mem (neither a record ID nor an entry: entries stay below it).
	probeID = math.MaxUint32
)

// recID is the record item lists (x.mu held).
func (x *keyIndex) recID(item uint32) uint32 {
	if item&entryBit != 0 {
		return x.ent.get(item &^ entryBit)
	}
	return item
}

func newKeyIndex(t *objTable) *keyIndex {
	x := &keyIndex{t: t, disk: btree.NewG(32, func(a, b string) bool { return a < b }), entNext: 1,
		nparts: indexParts, partMin: indexPartMin, piece: indexPiece}
	x.parts = []*memPart{x.newPart()}
	t.dirMu = &x.mu
	return x
}

// entryOf is the entry listing record id, 0 when none does (x.mu held).
func (x *keyIndex) entryOf(id uint32) uint32 {
	if e := x.entOf.get(id); e != 0 && x.ent.get(e) == id {
		return e
	}
	return 0
}

// rec is the record item lists (x.mu held).
func (x *keyIndex) rec(item uint32) *object { return x.t.at(x.recID(item)) }

// newEntry makes an entry listing record id (x.mu held).
func (x *keyIndex) newEntry(id uint32) uint32 {
	var e uint32
	if k := len(x.entFree); k > 0 {
		e, x.entFree = x.entFree[k-1], x.entFree[:k-1]
	} else {
		if x.entNext == probeID&^entryBit {
			panic("master: listing index entries exhausted")
		}
		e = x.entNext
		x.entNext++
	}
	x.ent.set(e, id)
	x.entOf.set(id, e)
	return e
}

// freeEntry frees entry e, taken out of mem (x.mu held).
func (x *keyIndex) freeEntry(e uint32) {
	x.clearEntry(e)
	x.entFree = append(x.entFree, e)
}

// clearEntry empties entry e, taken out of mem: it lists nothing and its
// record names no entry. It writes only e's place in ent and its record's
// in entOf (a partition's inserts run it at once as others run theirs).
func (x *keyIndex) clearEntry(e uint32) {
	id := x.ent.get(e)
	if id != 0 && x.entOf.get(id) == e {
		x.entOf.set(id, 0)
	}
	x.ent.set(e, 0)
}

// acquire takes mu (the caller holds Master.mu) and inserts the queued and
// staged restore inserts first; release gives mu back.
func (x *keyIndex) acquire() {
	x.mu.Lock()
	x.insertQueuedMu()
	x.insertMu(x.staged)
	x.staged = x.staged[:0]
}

func (x *keyIndex) release() { x.mu.Unlock() }

// recycle keeps q's array as the next queue's.
func (x *keyIndex) recycle(q []uint32) {
	if cap(q) == 0 {
		return
	}
	x.qmu.Lock()
	if x.spare == nil {
		x.spare = q[:0]
	}
	x.qmu.Unlock()
}

// insertMu inserts the objects ids into mem (x.mu held): each became
// visible. A record already listed by an entry stays as it is; one whose
// key is listed by another item takes its place (an entry replaced is
// freed). A large batch is inserted by several goroutines, each in
// partitions of its own (index_parts.go).
func (x *keyIndex) insertMu(ids []uint32) {
	if len(ids) == 0 {
		return
	}
	for _, id := range ids {
		if id >= entryBit {
			panic("master: record ID past the listing index's range")
		}
	}
	x.planParts(ids)
	if len(ids) >= x.partMin {
		if w := cmp.Or(x.workers, indexWorkers()); w > 1 {
			x.insertParallel(ids, w)
			return
		}
	}
	x.insertSeq(ids)
}

// insertSeq is insertMu's inserts, made in order by the caller.
func (x *keyIndex) insertSeq(ids []uint32) {
	t := x.t
	guess := 0
	for _, id := range ids {
		if x.entryOf(id) != 0 {
			continue
		}
		k := t.keyBytes(t.at(id))
		guess = x.partNear(k, guess)
		e, added := x.insertPart(x.parts[guess], id, k)
		if e != 0 {
			x.entFree = append(x.entFree, e)
		}
		if added {
			x.n++
		}
		if x.disk.Len() > 0 {
			x.disk.Delete(string(k))
		}
	}
}

// stage notes that the restored object id became visible (Master.mu
// held): it is inserted with the part's others (flush), or before any
// other use of the index (acquire).
func (x *keyIndex) stage(id uint32) { x.staged = append(x.staged, id) }

// flush hands the staged inserts to the drain goroutine (Master.mu held),
// starting it when none runs.
func (x *keyIndex) flush() {
	if len(x.staged) == 0 {
		return
	}
	x.qmu.Lock()
	if x.queue == nil {
		x.queue, x.spare = x.spare, nil
	}
	x.queue = append(x.queue, x.staged...)
	start := !x.draining
	x.draining = true
	x.qmu.Unlock()
	x.staged = x.staged[:0]
	if start {
		go x.drain()
	}
}

// drain inserts the queued IDs, a batch at a time under mu, until the
// queue is empty.
func (x *keyIndex) drain() {
	for {
		x.mu.Lock()
		x.qmu.Lock()
		q := x.queue
		x.queue = nil
		if len(q) == 0 {
			x.draining = false
			x.qmu.Unlock()
			x.mu.Unlock()
			return
		}
		x.qmu.Unlock()
		x.insertMu(q)
		x.mu.Unlock()
		x.recycle(q)
	}
}

// backlog is the number of queued inserts.
func (x *keyIndex) backlog() int {
	x.qmu.Lock()
	defer x.qmu.Unlock()
	return len(x.queue)
}

// catchUp inserts what is queued, without Master.mu: a restore calls it
// when the queue runs more than a part behind, so that its decisions wait
// for the inserts rather than let them pile up.
func (x *keyIndex) catchUp() {
	x.mu.Lock()
	x.insertQueuedMu()
	x.mu.Unlock()
}

// insertQueuedMu inserts what is queued (x.mu held).
func (x *keyIndex) insertQueuedMu() {
	x.qmu.Lock()
	q := x.queue
	x.queue = nil
	x.qmu.Unlock()
	x.insertMu(q)
	x.recycle(q)
}

// len is the number of keys listed.
func (x *keyIndex) len() int {
	x.acquire()
	defer x.release()
	return x.memLen() + x.disk.Len()
}

// ascend calls fn with the keys from pivot on in order until it returns
// false; fn must return false by its limit-th call, and must not use the
// index.
func (x *keyIndex) ascend(pivot string, limit int, fn func(k string) bool) {
	x.acquire()
	defer x.release()
	if x.disk.Len() == 0 {
		stop := false
		x.ascendMem(pivot, &stop, func(item uint32) bool {
			stop = !fn(x.t.key(x.rec(item)))
			return !stop
		})
		return
	}
	var a []uint32
	var b []string
	stop := false
	x.ascendMem(pivot, &stop, func(item uint32) bool { a = append(a, x.recID(item)); stop = len(a) >= limit; return !stop })
	x.disk.AscendGreaterOrEqual(pivot, func(k string) bool { b = append(b, k); return len(b) < limit })
	for i, j := 0, 0; i < len(a) || j < len(b); {
		var k string
		if j == len(b) || (i < len(a) && string(x.t.keyBytes(x.t.at(a[i]))) < b[j]) {
			k = x.t.key(x.t.at(a[i]))
			i++
		} else {
			k = b[j]
			j++
		}
		if !fn(k) {
			return
		}
	}
}

// ascendRecs is ascend for a listing: fn gets each key's record (nil for a
// key held only on a disk tier) and its bytes, which it must not keep
// (arena bytes for a record), so that a walk allocates nothing per key.
func (x *keyIndex) ascendRecs(pivot string, limit int, fn func(o *object, k []byte) bool) {
	x.acquire()
	defer x.release()
	if x.disk.Len() == 0 {
		stop := false
		x.ascendMem(pivot, &stop, func(item uint32) bool {
			o := x.rec(item)
			stop = !fn(o, x.t.keyBytes(o))
			return !stop
		})
		return
	}
	var a []uint32
	var b []string
	stop := false
	x.ascendMem(pivot, &stop, func(item uint32) bool { a = append(a, x.recID(item)); stop = len(a) >= limit; return !stop })
	x.disk.AscendGreaterOrEqual(pivot, func(k string) bool { b = append(b, k); return len(b) < limit })
	for i, j := 0, 0; i < len(a) || j < len(b); {
		var o *object
		var k []byte
		if j == len(b) || (i < len(a) && string(x.t.keyBytes(x.t.at(a[i]))) < b[j]) {
			o = x.t.at(a[i])
			k = x.t.keyBytes(o)
			i++
		} else {
			k = []byte(b[j])
			j++
		}
		if !fn(o, k) {
			return
		}
	}
}

// indexObjectLocked lists o, which became visible.
func (m *Master) indexObjectLocked(o *object, key string) {
	x := m.index
	x.acquire()
	defer x.release()
	x.insertMu([]uint32{o.id})
}

// handOverIndexLocked lists s, the unfinished put about to take o's key, in
// o's place: o is the key's visible version that s replaces in the same hold
// of the lock. When an entry lists o it lists s instead, in place (O(1): the
// key, and so the entry's place in the tree, stays); the key's first upsert
// replaces o's item with a new entry listing s (one step of the tree, the
// new item comparing as o's key). s has its own key only once it is
// rekeyed, and no index operation may run before.
//
// The index's goroutine cannot read s's record before it is rekeyed: acquire
// leaves nothing queued, and nothing is queued again before this hold of the
// Master's lock ends.
func (m *Master) handOverIndexLocked(o, s *object) {
	x := m.index
	x.acquire()
	defer x.release()
	if e := x.entryOf(o.id); e != 0 {
		x.ent.set(e, s.id)
		x.entOf.set(s.id, e)
		x.entOf.set(o.id, 0)
		return
	}
	e := x.newEntry(s.id) | entryBit
	k := m.objects.keyBytes(o)
	p := x.parts[x.partOf(k)]
	p.hot, p.hotKey = e, k
	old, found := p.t.ReplaceOrInsert(e)
	p.hot, p.hotKey = 0, nil
	if !found {
		x.n++
	} else if old&entryBit != 0 {
		x.freeEntry(old &^ entryBit)
	}
}

// unindexObjectLocked takes o, which stops being visible in memory, out of
// the index; its key stays listed while a disk copy holds it.
func (m *Master) unindexObjectLocked(o *object, key string) {
	x := m.index
	x.acquire()
	defer x.release()
	item := o.id
	if e := x.entryOf(o.id); e != 0 {
		item = e | entryBit
	}
	if old, found := x.deletePart(x.partOf(m.objects.keyBytes(o)), item); found && old&entryBit != 0 {
		x.freeEntry(old &^ entryBit)
	}
	if m.disk[key] != nil {
		x.disk.ReplaceOrInsert(key)
	}
}

// indexAddLocked lists key, which a disk copy now holds.
func (m *Master) indexAddLocked(key string) {
	if o := m.objects.get(key); o == nil || !o.complete {
		x := m.index
		x.acquire()
		defer x.release()
		x.disk.ReplaceOrInsert(key)
	}
}

// indexDropLocked takes key, whose disk copy went, out of the keys held
// only on disk (a complete object in memory keeps it listed).
func (m *Master) indexDropLocked(key string) {
	if m.disk[key] == nil {
		x := m.index
		x.acquire()
		defer x.release()
		x.disk.Delete(key)
	}
}

// listScanFactor bounds the index entries one List page may pass over
// (limit x listScanFactor + 1024) while it skips keys held only on disk:
// past that the page ends early with a cursor.
const listScanFactor = 16

// listHold is the most index entries one hold of the lock passes over
// while a List page is built: a page of any size lets other calls in every
// listHold keys. Between two holds the listing yields its processor
// (runtime.Gosched), so that a call woken by the unlock takes the lock
// before the listing takes it again (a sync.Mutex lets the running
// goroutine barge ahead of a waiter for up to 1 ms). Smaller holds cost
// the listing more lock round trips; see docs/store.md for the figures.
const listHold = 128

// List returns up to limit complete objects whose key has the prefix and
// sorts after the cursor `after`, in key order, and the cursor of the next
// page ("" when this is the last page). limit <= 0 means 1000. A page walks
// the ordered index from the cursor, taking the lock for at most listHold
// keys at a time: O(log n + listHold) per hold, never a removed key; keys
// added after a listing started appear in its later pages (or later in its
// page) when they sort after its cursor. A page may hold fewer than limit
// keys and still have a next cursor (keys held only on a disk tier are
// skipped, and a page passes over a bounded number of them).
func (m *Master) List(prefix, after string, limit int) ([]KeyInfo, string) {
	if limit <= 0 {
		limit = 1000
	}
	var out []KeyInfo
	budget := limit*listScanFactor + 1024
	cursor := after
	for {
		step := min(listHold, budget)
		rows, last, passed, more := m.listStep(prefix, cursor, limit-len(out), step)
		out = append(out, rows...)
		budget -= passed
		switch {
		case !more:
			return out, ""
		case len(out) == limit:
			return out, out[len(out)-1].Key
		case budget <= 0:
			return out, last // the next page starts after the last key passed
		}
		cursor = last
		runtime.Gosched()
	}
}

// listStep passes over at most pass index entries with the prefix after
// the cursor under one hold of the lock, and returns the complete objects
// among them (at most want), the last key it passed, how many it passed,
// and whether keys with the prefix are left after that one. Under the
// lock it reads each listed object from its record (no lookup by key) and
// copies the keys into one buffer; their strings are made after the
// unlock, so the hold allocates (and pays GC assists) per hold, not per
// key.
func (m *Master) listStep(prefix, after string, want, pass int) (rows []KeyInfo, last string, passed int, more bool) {
	type row struct {
		end      int // the key's end in buf (it starts where the previous row's ends)
		size     uint64
		replicas int
		listed   bool // a complete object (a row), not only a key passed over
	}
	var buf []byte
	var got []row
	listed, first := 0, true
	m.mu.Lock()
	m.index.ascendRecs(max(prefix, after), pass+3, func(o *object, k []byte) bool {
		if first { // the walk starts at the cursor itself when it is a key
			if first = false; string(k) == after {
				return true
			}
		}
		if len(k) < len(prefix) || string(k[:len(prefix)]) != prefix {
			return false
		}
		if listed == want || passed == pass {
			more = true
			return false
		}
		passed++
		if buf == nil {
			buf = make([]byte, 0, pass*(len(k)+8))
		}
		buf = append(buf, k...)
		r := row{end: len(buf)}
		if o == nil { // held only on a disk tier: listed when a complete object holds it after all
			o = m.objects.get(string(k))
		}
		if o != nil && o.complete {
			r.size, r.replicas, r.listed = o.size, int(o.nrep), true
			listed++
		}
		got = append(got, r)
		return true
	})
	m.mu.Unlock()
	if len(got) == 0 {
		return nil, "", 0, more
	}
	keys := unsafe.String(unsafe.SliceData(buf), len(buf)) // buf is not written again
	rows = make([]KeyInfo, 0, listed)
	start := 0
	for _, r := range got {
		if r.listed {
			rows = append(rows, KeyInfo{Key: keys[start:r.end], Size: r.size, Replicas: r.replicas})
		}
		last, start = keys[start:r.end], r.end
	}
	return rows, last, passed, more
}
