package master

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// indexBenchObjects is MOONCAKE_INDEX_OBJECTS (default 1M): the keys of
// the listing index's benchmarks.
func indexBenchObjects(b *testing.B) int {
	n := 1_000_000
	if s := os.Getenv("MOONCAKE_INDEX_OBJECTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			b.Fatalf("MOONCAKE_INDEX_OBJECTS=%q: want a positive count", s)
		}
	}
	return n
}

// indexBenchTable is an object table holding n keys added in a restore's
// order (record IDs and key bytes in that order) and their IDs: with
// random, keys in no order (hashes, as a KV cache's); else obj/%09d as
// the master bench's 8 loading clients leave them on a node (runs of 512
// consecutive keys from 8 ranges interleaved), as BenchmarkRestoreScale.
func indexBenchTable(n int, random bool) (*objTable, []uint32) {
	t := newObjTable()
	t.reserve(n)
	name := func(i int) string { return fmt.Sprintf("obj/%09d", i) }
	if random {
		name = func(i int) string { return fmt.Sprintf("%013x", uint64(i)*0x9e3779b97f4a7c15&(1<<52-1)) }
	}
	ids := make([]uint32, 0, n)
	per := (n + 7) / 8
	for run := 0; len(ids) < n; run++ {
		for client := range 8 {
			for k := run * 512; k < min(per, (run+1)*512) && client*per+k < n; k++ {
				ids = append(ids, t.add(name(client*per+k), object{size: 64, complete: true}).id)
			}
		}
	}
	return t, ids
}

// indexModes are the listing index's set-ups the benchmarks compare: one
// tree (as a pool of puts has), the restore's partitions inserted by one
// goroutine, and by indexWorkers() goroutines.
var indexModes = []struct {
	name           string
	parts, workers int
}{
	{"tree", 1, 1},
	{"parts", indexParts, 1},
	{"parallel", indexParts, indexWorkers()},
}

// benchModes runs each of modes once per iteration, in turn (so that a
// shared machine's load falls on all alike), with run timed, and reports
// each one's time per item (unit: the mode's name and per) and the first
// mode's time over each other's (unit first/mode).
func benchModes(b *testing.B, n int, per string, modes int, run func(mode int) time.Duration) {
	took := make([]time.Duration, modes)
	for b.Loop() {
		for i := range modes {
			took[i] += run(i)
		}
	}
	for i := range modes {
		b.ReportMetric(float64(took[i].Nanoseconds())/float64(b.N*n), indexModes[i].name+"-ns/"+per)
		if i > 0 {
			b.ReportMetric(float64(took[0])/float64(took[i]), indexModes[0].name+"/"+indexModes[i].name)
		}
	}
}

// BenchmarkIndexInsert: a restore's inserts in the listing index, as its
// goroutine makes them (batches of RestoreChunkObjects, in the reports'
// order), of MOONCAKE_INDEX_OBJECTS keys into an empty index, with each of
// indexModes (tree: one B-tree; parts: indexParts key ranges, one
// goroutine; parallel: the ranges inserted by indexWorkers() goroutines):
// ns/insert each, and the ratios of tree's time to the others'.
func BenchmarkIndexInsert(b *testing.B) {
	n := indexBenchObjects(b)
	for _, order := range []string{"interleaved", "random"} {
		t, ids := indexBenchTable(n, order == "random")
		b.Run(order, func(b *testing.B) {
			benchModes(b, n, "insert", len(indexModes), func(mode int) time.Duration {
				x := newKeyIndex(t)
				x.nparts, x.workers = indexModes[mode].parts, indexModes[mode].workers
				runtime.GC() // the last index's garbage not collected during this one
				start := time.Now()
				x.mu.Lock()
				for i := 0; i < len(ids); i += RestoreChunkObjects {
					x.insertMu(ids[i:min(len(ids), i+RestoreChunkObjects)])
				}
				got := x.memLen()
				x.mu.Unlock()
				took := time.Since(start)
				if got != n {
					b.Fatalf("%d keys indexed, want %d", got, n)
				}
				return took
			})
		})
	}
}

// BenchmarkIndexList: a full walk of the listing index of
// MOONCAKE_INDEX_OBJECTS keys inserted as BenchmarkIndexInsert does, in
// holds of listHold keys from a cursor as List makes them, with one tree
// and with the restore's partitions: ns/key each and their ratio (the
// same work per key: about 1).
func BenchmarkIndexList(b *testing.B) {
	n := indexBenchObjects(b)
	for _, order := range []string{"interleaved", "random"} {
		t, ids := indexBenchTable(n, order == "random")
		var xs []*keyIndex
		for _, mode := range indexModes[:2] {
			x := newKeyIndex(t)
			x.nparts, x.workers = mode.parts, mode.workers
			x.mu.Lock()
			for i := 0; i < len(ids); i += RestoreChunkObjects {
				x.insertMu(ids[i:min(len(ids), i+RestoreChunkObjects)])
			}
			parts := len(x.parts)
			x.mu.Unlock()
			if parts != mode.parts {
				b.Fatalf("%d partitions, want %d", parts, mode.parts)
			}
			xs = append(xs, x)
		}
		var buf []byte
		b.Run(order, func(b *testing.B) {
			benchModes(b, n, "key", len(xs), func(mode int) time.Duration {
				x := xs[mode]
				start := time.Now()
				total, cursor := 0, ""
				for {
					passed, last := 0, 0
					buf = buf[:0]
					x.ascendRecs(cursor, listHold+1, func(o *object, k []byte) bool {
						if passed == 0 && total > 0 && string(k) == cursor {
							return true // the walk starts at the cursor itself
						}
						last = len(buf)
						buf = append(buf, k...)
						passed++
						return passed < listHold
					})
					total += passed
					if passed < listHold {
						break
					}
					cursor = string(buf[last:])
				}
				took := time.Since(start)
				if total != n {
					b.Fatalf("walked %d keys of %d", total, n)
				}
				return took
			})
		})
	}
}
