package master

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
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

// benchKeyOrder is the order a node reports keys 0..n-1 in after the
// master bench's load (8 clients putting batches of 512 consecutive keys):
// batched, as its loaders take the batches from one counter (runs of 512,
// 8 runs in flight together in any order); else interleaved, as 8 loaders
// each putting a range of its own would (runs of 512 from 8 ranges in
// turn).
func benchKeyOrder(n int, order string) []int {
	seq := make([]int, 0, n)
	if order == "batched" {
		rng := rand.New(rand.NewPCG(1, 2))
		for lo := 0; lo < n; lo += 8 * 512 {
			for _, b := range rng.Perm(8) {
				for i := lo + b*512; i < min(n, lo+(b+1)*512); i++ {
					seq = append(seq, i)
				}
			}
		}
		return seq
	}
	per := (n + 7) / 8
	for run := 0; len(seq) < n; run++ {
		for client := range 8 {
			for k := run * 512; k < min(per, (run+1)*512) && client*per+k < n; k++ {
				seq = append(seq, client*per+k)
			}
		}
	}
	return seq
}

// benchKeyName is the bench's key i: obj/%09d, or with random a 13-byte
// hash of i (keys in no order, as a KV cache's: a bijection of [0, 2^52)).
func benchKeyName(i int, random bool) string {
	if random {
		return fmt.Sprintf("%013x", uint64(i)*0x9e3779b97f4a7c15&(1<<52-1))
	}
	return fmt.Sprintf("obj/%09d", i)
}

// indexBenchTable is an object table holding n keys added in a restore's
// order (record IDs and key bytes in that order), and their IDs: order
// is benchKeyOrder's, or random (hashes in the interleaved order).
func indexBenchTable(n int, order string) (*objTable, []uint32) {
	t := newObjTable()
	t.reserve(n)
	ids := make([]uint32, 0, n)
	for _, i := range benchKeyOrder(n, order) {
		ids = append(ids, t.add(benchKeyName(i, order == "random"), object{size: 64, complete: true}).id)
	}
	return t, ids
}

// indexModes are the listing index's set-ups the benchmarks compare: one
// tree (as a pool of puts has), the restore's partitions inserted by one
// goroutine, by indexWorkers() goroutines (parallel), and by 8 (wide: as
// a host of 10 processors or more runs them; on fewer, the goroutines
// take turns).
var indexModes = []struct {
	name           string
	parts, workers int
}{
	{"tree", 1, 1},
	{"parts", indexParts, 1},
	{"parallel", indexParts, indexWorkers()},
	{"wide", indexParts, 8},
}

// benchModes runs each of modes once per iteration, in turn (so that a
// shared machine's load falls on all alike; in reverse order every other
// iteration, as the first one's walk is faster), with run timed, and reports
// each one's wall time and CPU time (the process's) per item (units: the
// mode's name, and cpu, per item), and the first mode's wall time over
// each other's (unit first/mode).
func benchModes(b *testing.B, n int, per string, modes int, run func(mode int) time.Duration) {
	took := make([]time.Duration, modes)
	cpu := make([]time.Duration, modes)
	for k := 0; b.Loop(); k++ {
		for j := range modes {
			i := j
			if k%2 == 1 { // each mode first as often as last
				i = modes - 1 - j
			}
			c := processCPU()
			took[i] += run(i)
			cpu[i] += processCPU() - c
		}
	}
	for i := range modes {
		name := indexModes[i].name
		b.ReportMetric(float64(took[i].Nanoseconds())/float64(b.N*n), name+"-ns/"+per)
		b.ReportMetric(float64(cpu[i].Nanoseconds())/float64(b.N*n), name+"-cpu-ns/"+per)
		if i > 0 {
			b.ReportMetric(float64(took[0])/float64(took[i]), indexModes[0].name+"/"+name)
		}
	}
}

// processCPU is the CPU time the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// indexParallelism inserts ids as BenchmarkIndexInsert does with workers
// goroutines and returns how many goroutines' work at once the batches
// offer: the inserts over the sum of each batch's longest goroutine's
// inserts (its partitions' taken in turn by the goroutine that is done
// first, as insertParallel's goroutines take them). A figure of the
// partitions, whatever the processors free on the machine that
// measures it.
func indexParallelism(t *objTable, ids []uint32, workers int) float64 {
	x := newKeyIndex(t)
	x.workers = workers
	x.mu.Lock()
	defer x.mu.Unlock()
	var span int
	for i := 0; i < len(ids); i += RestoreChunkObjects {
		before := map[*memPart]int{}
		for _, p := range x.parts {
			before[p] = p.t.Len()
		}
		batch := ids[i:min(len(ids), i+RestoreChunkObjects)]
		x.insertMu(batch)
		// The partitions' inserts taken by the goroutines in turn, each
		// by the one that is done first.
		load := make([]int, workers)
		for _, p := range x.parts {
			if g := p.t.Len() - before[p]; g > 0 {
				load[slices.Index(load, slices.Min(load))] += g
			}
		}
		span += slices.Max(load)
	}
	return float64(len(ids)) / float64(span)
}

// BenchmarkIndexInsert: a restore's inserts in the listing index, as its
// goroutine makes them (batches of RestoreChunkObjects, in the reports'
// order), of MOONCAKE_INDEX_OBJECTS keys into an empty index, with each of
// indexModes (tree: one B-tree; parts: indexParts key ranges, one
// goroutine; parallel: the ranges inserted by indexWorkers() goroutines):
// ns/insert each, the ratios of tree's time to the others', and the
// goroutines' work at once the partitions offer (parallelism: see
// indexParallelism; a machine with that many processors free runs the
// inserts about that much faster than one).
func BenchmarkIndexInsert(b *testing.B) {
	n := indexBenchObjects(b)
	for _, order := range []string{"interleaved", "batched", "random"} {
		t, ids := indexBenchTable(n, order)
		b.Run(order, func(b *testing.B) {
			var par []float64
			for _, mode := range indexModes[2:] {
				par = append(par, indexParallelism(t, ids, mode.workers))
			}
			defer func() { // after the loop, which drops the metrics reported before
				for i, mode := range indexModes[2:] {
					b.ReportMetric(par[i], mode.name+"-parallelism")
				}
			}()
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
// holds of listHold keys from a cursor as List makes them, with each of
// indexModes (as each leaves the index: parallel's cut in more partitions
// where keys come in about ascending order): ns/key each and their
// ratios (the same work per key: about 1), each index's heap per key
// (B/key) and its partitions.
func BenchmarkIndexList(b *testing.B) {
	n := indexBenchObjects(b)
	for _, order := range []string{"interleaved", "batched", "random"} {
		t, ids := indexBenchTable(n, order)
		var xs []*keyIndex
		var heap []float64
		var partitions []int
		for _, mode := range indexModes {
			before := liveHeap()
			x := newKeyIndex(t)
			x.nparts, x.workers = mode.parts, mode.workers
			x.mu.Lock()
			for i := 0; i < len(ids); i += RestoreChunkObjects {
				x.insertMu(ids[i:min(len(ids), i+RestoreChunkObjects)])
			}
			parts := len(x.parts)
			x.mu.Unlock()
			if parts < mode.parts || mode.workers == 1 && parts != mode.parts {
				b.Fatalf("%d partitions, want %d", parts, mode.parts)
			}
			partitions = append(partitions, parts)
			xs = append(xs, x)
			heap = append(heap, (float64(liveHeap())-float64(before))/float64(n))
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
			for i, h := range heap {
				b.ReportMetric(h, indexModes[i].name+"-B/key")
				b.ReportMetric(float64(partitions[i]), indexModes[i].name+"-partitions")
			}
		})
	}
}

// BenchmarkIndexPut: a put's insert and a removal's delete of one key
// (a random one among MOONCAKE_INDEX_OBJECTS keys in the master bench's
// order, inserted as BenchmarkIndexInsert does) in the listing index as
// each of indexModes leaves it: ns/key each (one insert and one delete)
// and their ratios (the partitions' routing against one tree's depth).
func BenchmarkIndexPut(b *testing.B) {
	n := indexBenchObjects(b)
	t, ids := indexBenchTable(n, "batched")
	rng := rand.New(rand.NewPCG(3, 4))
	extra := make([]uint32, 4096) // keys between the indexed ones
	for i := range extra {
		extra[i] = t.add(benchKeyName(rng.IntN(n), false)+"+", object{size: 64, complete: true}).id
	}
	var xs []*keyIndex
	for _, mode := range indexModes {
		x := newKeyIndex(t)
		x.nparts, x.workers = mode.parts, mode.workers
		x.mu.Lock()
		for i := 0; i < len(ids); i += RestoreChunkObjects {
			x.insertMu(ids[i:min(len(ids), i+RestoreChunkObjects)])
		}
		x.mu.Unlock()
		xs = append(xs, x)
	}
	benchModes(b, len(extra), "key", len(xs), func(mode int) time.Duration {
		x := xs[mode]
		start := time.Now()
		x.mu.Lock()
		for _, id := range extra {
			x.insertMu([]uint32{id})
			if _, found := x.deletePart(x.partOf(t.keyBytes(t.at(id))), id); !found {
				b.Fatalf("record %d not found after its insert", id)
			}
		}
		x.mu.Unlock()
		return time.Since(start)
	})
}
