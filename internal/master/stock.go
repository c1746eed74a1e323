package master

import (
	"sync"
	"unsafe"
)

// chunkStock holds record chunks (recChunk records) and key arena chunks
// (arenaChunk bytes) made ahead of need, their memory already written once,
// for the object table to take when it grows (objTable.addHashed, putKey).
// A new chunk's memory reaches the process at its first write, one page
// fault per page: at millions of objects a restore took a fifth of its
// time under the Master's lock in those faults. A restore call fills the
// stock before its turn (prepare), without the lock and while another
// call decides; the stock is emptied when the restore ends (drop). It has
// its own lock (never held with another).
type chunkStock struct {
	mu   sync.Mutex
	recs [][]object
	keys [][]byte
}

// maxStockRecs and maxStockKeys bound the chunks a stock holds (24 MiB
// and 4 MiB): enough for the reports of a few calls ahead.
const (
	maxStockRecs = 4
	maxStockKeys = 4
)

// pageSize is the granularity at which prepare writes a chunk: the
// smallest page size of the platforms the master runs on.
const pageSize = 4096

// prepare stocks what about objects new objects holding keyBytes bytes of
// keys need, within the bounds: two chunks more of each than they fill
// (the calls in flight behind the one that prepares take them too).
func (s *chunkStock) prepare(objects, keyBytes int) {
	wantRecs := min(maxStockRecs, objects/recChunk+2)
	wantKeys := min(maxStockKeys, keyBytes/arenaChunk+2)
	for {
		s.mu.Lock()
		needRecs, needKeys := len(s.recs) < wantRecs, len(s.keys) < wantKeys
		s.mu.Unlock()
		if !needRecs && !needKeys {
			return
		}
		if needRecs {
			c := make([]object, recChunk)
			const per = pageSize / int(unsafe.Sizeof(object{})) // records per page, at least
			for i := 0; i < len(c); i += per {
				c[i].id = 0 // the page is the process's now (a zeroed record: as made)
			}
			s.mu.Lock()
			s.recs = append(s.recs, c)
			s.mu.Unlock()
		}
		if needKeys {
			c := make([]byte, arenaChunk)
			for i := 0; i < len(c); i += pageSize {
				c[i] = 0
			}
			s.mu.Lock()
			s.keys = append(s.keys, c)
			s.mu.Unlock()
		}
	}
}

// takeRecs is a stocked chunk of recChunk zeroed records, nil when none.
func (s *chunkStock) takeRecs() []object { return takeLast(&s.mu, &s.recs) }

// takeKeys is a stocked arena chunk of arenaChunk zero bytes, nil when
// none.
func (s *chunkStock) takeKeys() []byte { return takeLast(&s.mu, &s.keys) }

// takeLast pops the last chunk of *l under mu (nil when none).
func takeLast[T any](mu *sync.Mutex, l *[]T) T {
	mu.Lock()
	defer mu.Unlock()
	var zero T
	n := len(*l)
	if n == 0 {
		return zero
	}
	c := (*l)[n-1]
	(*l)[n-1], *l = zero, (*l)[:n-1]
	return c
}

// drop lets the stocked chunks go.
func (s *chunkStock) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs, s.keys = nil, nil
}
