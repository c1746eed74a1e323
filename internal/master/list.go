package master

import (
	"math"
	"runtime"
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
// it. The objects' keys are a B-tree of their record IDs ordered by the keys
// in the object table's arena (4 bytes per item, no pointer per key); the
// keys held only on a disk tier are a B-tree of strings. A walk merges the
// two.
type keyIndex struct {
	t    *objTable
	mem  *btree.BTreeG[uint32] // complete objects in memory
	disk *btree.BTreeG[string] // keys held only on a disk tier
}

// probeID is the item that stands for objTable.probe in a search of mem.
const probeID = math.MaxUint32

func newKeyIndex(t *objTable) keyIndex {
	x := keyIndex{t: t, disk: btree.NewG(32, func(a, b string) bool { return a < b })}
	key := func(id uint32) []byte {
		switch id {
		case probeID:
			return t.probe
		case t.hot:
			return t.hotKey
		}
		return t.keyBytes(t.at(id))
	}
	x.mem = btree.NewG(64, func(a, b uint32) bool { return keyLess(key(a), key(b)) })
	return x
}

// len is the number of keys listed.
func (x *keyIndex) len() int { return x.mem.Len() + x.disk.Len() }

// ascend calls fn with the keys from pivot on in order until it returns
// false; fn must return false by its limit-th call.
func (x *keyIndex) ascend(pivot string, limit int, fn func(k string) bool) {
	x.t.probe = append(x.t.probe[:0], pivot...)
	if x.disk.Len() == 0 {
		x.mem.AscendGreaterOrEqual(probeID, func(id uint32) bool { return fn(x.t.key(x.t.at(id))) })
		return
	}
	var a []uint32
	var b []string
	x.mem.AscendGreaterOrEqual(probeID, func(id uint32) bool { a = append(a, id); return len(a) < limit })
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
	x.t.probe = append(x.t.probe[:0], pivot...)
	if x.disk.Len() == 0 {
		x.mem.AscendGreaterOrEqual(probeID, func(id uint32) bool {
			o := x.t.at(id)
			return fn(o, x.t.keyBytes(o))
		})
		return
	}
	var a []uint32
	var b []string
	x.mem.AscendGreaterOrEqual(probeID, func(id uint32) bool { a = append(a, id); return len(a) < limit })
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
	// Every comparison of the insert has o on one side: its key is at hand.
	t := m.objects
	t.hot, t.hotKey = o.id, t.keyBytes(o)
	m.index.mem.ReplaceOrInsert(o.id)
	t.hot, t.hotKey = 0, nil
	if m.index.disk.Len() > 0 {
		m.index.disk.Delete(key)
	}
}

// handOverIndexLocked lists s, the unfinished put about to take o's key, in
// o's place: o is the key's visible version that s replaces in the same hold
// of the lock. One step of the index instead of a delete and an insert; s
// has its own key only once it is rekeyed, and no index operation may run
// before (it compares as o's key only during this call).
func (m *Master) handOverIndexLocked(o, s *object) {
	t := m.objects
	t.hot, t.hotKey = s.id, t.keyBytes(o)
	m.index.mem.ReplaceOrInsert(s.id)
	t.hot, t.hotKey = 0, nil
}

// unindexObjectLocked takes o, which stops being visible in memory, out of
// the index; its key stays listed while a disk copy holds it.
func (m *Master) unindexObjectLocked(o *object, key string) {
	m.index.mem.Delete(o.id)
	if m.disk[key] != nil {
		m.index.disk.ReplaceOrInsert(key)
	}
}

// indexAddLocked lists key, which a disk copy now holds.
func (m *Master) indexAddLocked(key string) {
	if o := m.objects.get(key); o == nil || !o.complete {
		m.index.disk.ReplaceOrInsert(key)
	}
}

// indexDropLocked takes key, whose disk copy went, out of the keys held
// only on disk (a complete object in memory keeps it listed).
func (m *Master) indexDropLocked(key string) {
	if m.disk[key] == nil {
		m.index.disk.Delete(key)
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
