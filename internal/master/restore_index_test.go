package master

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// listAll is every key List returns, page by page.
func listAll(t *testing.T, m *Master) []string {
	t.Helper()
	var keys []string
	for after := ""; ; {
		rows, next := m.List("", after, 100)
		for _, r := range rows {
			keys = append(keys, r.Key)
		}
		if next == "" {
			return keys
		}
		after = next
	}
}

// checkListedExist: the listing holds exactly the keys that exist, each once.
func checkListedExist(t *testing.T, m *Master, keys []string) {
	t.Helper()
	listed := listAll(t, m)
	if !slices.IsSorted(listed) || len(slices.Compact(slices.Clone(listed))) != len(listed) {
		t.Fatalf("listing out of order or with duplicates")
	}
	in := map[string]bool{}
	for _, k := range listed {
		in[k] = true
	}
	for _, k := range keys {
		if ok, _ := m.Exist(k); ok != in[k] {
			t.Fatalf("%q exists %v, listed %v", k, ok, in[k])
		}
	}
	if len(listed) != m.Stats().Objects {
		t.Fatalf("%d keys listed, %d objects", len(listed), m.Stats().Objects)
	}
}

// TestRestoreIndexQueued: a restored key whose insert in the listing index
// is still queued (the index's goroutine held off) and is removed, or
// removed and put again, meanwhile is listed exactly when it exists: the
// removal and the put act after the queued insert.
func TestRestoreIndexQueued(t *testing.T) {
	for _, putAgain := range []bool{false, true} {
		m, _ := newDurable(t)
		other := SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 2 << 30, Size: 1 << 20}
		if err := m.MountSegment("w", other); err != nil {
			t.Fatal(err)
		}
		// The object table's first chunks of records and keys exist: the
		// restore below grows no directory (which waits for the index).
		mustPut(t, m, "pre", 100, ReplicateConfig{PreferredSegments: []string{"b"}})
		id, err := m.RestoreBegin("c", []SegmentSpec{restoreSpec})
		if err != nil {
			t.Fatal(err)
		}
		var held []HeldObject
		var keys []string
		for i := range 50 {
			k := fmt.Sprintf("k%02d", i)
			held, keys = append(held, rep(uint64(i)*4096, k, 1)), append(keys, k)
		}
		m.index.mu.Lock() // the index's goroutine waits: the chunk's inserts stay queued
		if _, err := m.RestoreChunk("c", id, 0, held); err != nil {
			m.index.mu.Unlock()
			t.Fatal(err)
		}
		if n := m.index.backlog(); n != len(held)-1 { // the last report waits for what follows it
			m.index.mu.Unlock()
			t.Fatalf("%d inserts queued, want %d", n, len(held)-1)
		}
		removed := make(chan error, 1)
		go func() { removed <- m.Remove("k07", false) }()
		// The removal takes the master's lock, then waits for the index.
		if !waitfor.Within(5*time.Second, func() bool {
			if m.mu.TryLock() {
				m.mu.Unlock()
				return false
			}
			return true
		}) {
			m.index.mu.Unlock()
			t.Fatal("the removal did not take the master's lock")
		}
		m.index.mu.Unlock()
		if err := <-removed; err != nil {
			t.Fatal(err)
		}
		if putAgain {
			mustPut(t, m, "k07", 100, ReplicateConfig{PreferredSegments: []string{"b"}})
		}
		if _, err := m.RestoreEnd("c", id); err != nil {
			t.Fatal(err)
		}
		checkListedExist(t, m, keys)
		if ok, _ := m.Exist("k07"); ok != putAgain {
			t.Fatalf("k07 exists %v after removal (put again %v)", ok, putAgain)
		}
		checkRestored(t, m)
	}
}

// TestRestoreIndexRaces: puts, removals and listings of the keys being
// restored, run while a restore's inserts are made by the index's
// goroutine, leave the listing exactly the keys that exist (run with
// -race: the goroutine reads the object table without the master's lock;
// a batch's inserts run on several goroutines, in key ranges the first
// batch chose, set beforehand (round 3), or cut at each batch's keys as
// they come in ascending order (round 4)).
func TestRestoreIndexRaces(t *testing.T) {
	const n = 3 * RestoreChunkObjects
	spec := SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: uint64(n+1) * 128}
	other := SegmentSpec{Name: "b", Endpoint: "ep-b", Base: 4 << 30, Size: 64 << 20}
	for round := range 5 {
		m, _ := newDurable(t)
		if err := m.MountSegment("w", other); err != nil {
			t.Fatal(err)
		}
		if round == 3 { // bounds equal to keys, between keys, an empty range
			m.index.mu.Lock()
			m.index.pinned, m.index.workers = true, 4
			m.index.setBounds([]string{"key/001000", "key/004096+", "key/006000", "key/006000~", "key/009000"})
			m.index.mu.Unlock()
		}
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		keys := make([]string, n)
		held := make([]HeldObject, n)
		order := rng.Perm(n) // key order unlike offset order
		if round == 4 {      // keys in offset order: each batch cuts the last partition as the others run
			order = order[:0]
			for i := range n {
				order = append(order, i)
			}
			m.index.workers = 4
		}
		for i, p := range order {
			keys[i] = fmt.Sprintf("key/%06d", p)
			held[i] = HeldObject{Segment: "a", Offset: uint64(i) * 128, Key: keys[i], Size: 64, CRC: 1, Seq: 1}
		}
		id, err := m.RestoreBegin("c", []SegmentSpec{spec})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		errs := make(chan error, 5)
		var commits atomic.Int64
		upserted := make([]string, 8)
		for i := range upserted {
			upserted[i] = fmt.Sprintf("key/%06d-up", i*n/8)
		}
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					k := keys[r.IntN(n)]
					switch w {
					case 0: // removals of restored keys, some put again on b
						if m.Remove(k, true) == nil && r.IntN(2) == 0 {
							if _, err := m.PutStart("w", k, 64, ReplicateConfig{PreferredSegments: []string{"b"}}); err == nil {
								if err := m.PutEnd("w", k, 1); err != nil {
									errs <- err
									return
								}
							}
						}
					case 1: // new keys among the restored ones
						nk := k + "+"
						if _, err := m.PutStart("w", nk, 64, ReplicateConfig{PreferredSegments: []string{"b"}}); err == nil {
							if err := m.PutEnd("w", nk, 1); err != nil {
								errs <- err
								return
							}
						}
					case 3: // upserts through put slots: a commit replacing a version hands its place in the index over
						uk := upserted[r.IntN(len(upserted))]
						rc := ReplicateConfig{PreferredSegments: []string{"b"}}
						if slot, _, err := m.PutReserve("w", 64, len(uk), rc); err == nil {
							if _, _, err := m.PutCommit("w", uk, slot, 1, rc, true); err == nil {
								commits.Add(1)
							}
						}
					case 2: // listings, each page checked in order
						rows, _ := m.List("key/", k, 50)
						for i := 1; i < len(rows); i++ {
							if rows[i-1].Key >= rows[i].Key {
								errs <- fmt.Errorf("page out of order: %q then %q", rows[i-1].Key, rows[i].Key)
								return
							}
						}
					}
				}
			}()
		}
		const chunk = 2048
		for i := 0; i < n; i += chunk {
			if _, err := m.RestoreChunk("c", id, uint32(i/chunk), held[i:min(n, i+chunk)]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := m.RestoreEnd("c", id); err != nil {
			t.Fatal(err)
		}
		// Some upserts committed (replacing ones among them: 8 keys).
		committed := waitfor.Within(10*time.Second, func() bool { return commits.Load() >= 50 })
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		all := slices.Clone(keys)
		for _, k := range keys {
			all = append(all, k+"+")
		}
		all = append(all, upserted...)
		if !committed {
			t.Fatalf("%d upserts committed", commits.Load())
		}
		checkListedExist(t, m, all)
		if b, _ := indexBounds(m); round == 4 && len(b) < n/2048 {
			t.Fatalf("%d bounds after a restore in key order", len(b))
		}
		checkRestored(t, m)
	}
}
