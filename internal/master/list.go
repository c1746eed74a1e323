package master

import (
	"runtime"
	"strings"

	"github.com/google/btree"
)

// KeyInfo is one row of List.
type KeyInfo struct {
	Key      string
	Size     uint64
	Replicas int
}

// The listing index: the keys of the visible objects (complete, in memory)
// and of the disk-only copies, in key order (a B-tree), so that a page of a
// listing and each chunk of a bulk removal cost O(log n + page) under the
// lock whatever the number of objects. Unfinished puts and put slots are
// not in it.

func newIndex() *btree.BTreeG[string] {
	return btree.NewG(32, func(a, b string) bool { return a < b })
}

// indexAddLocked puts key in the listing index.
func (m *Master) indexAddLocked(key string) { m.index.ReplaceOrInsert(key) }

// indexDropLocked takes key out of the listing index unless it is still
// visible: a complete object in memory or a disk copy.
func (m *Master) indexDropLocked(key string) {
	if o := m.objects[key]; (o != nil && o.complete) || m.disk[key] != nil {
		return
	}
	m.index.Delete(key)
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
// and whether keys with the prefix are left after that one.
func (m *Master) listStep(prefix, after string, want, pass int) (rows []KeyInfo, last string, passed int, more bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.index.AscendGreaterOrEqual(max(prefix, after), func(k string) bool {
		if k == after {
			return true
		}
		if !strings.HasPrefix(k, prefix) {
			return false
		}
		if len(rows) == want || passed == pass {
			more = true
			return false
		}
		passed++
		last = k
		if o := m.objects[k]; o != nil && o.complete {
			rows = append(rows, KeyInfo{Key: k, Size: o.size, Replicas: len(o.replicas)})
		}
		return true
	})
	return rows, last, passed, more
}
