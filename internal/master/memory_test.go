package master

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// TestObjectMemory measures the master's heap per object: N durable objects
// (keys "obj/%09d", 64-byte values, one replica each on one segment), the
// live heap they add after a full GC, and how long a forced GC cycle takes
// with them in the heap. N comes from MOONCAKE_MEM_OBJECTS (default 500000);
// it is skipped in -short runs and under the race detector, whose shadow
// memory would distort the figures. Run it as
//
//	go test -run TestObjectMemory -v ./internal/master
//
// and set MOONCAKE_MEM_PROFILE=mem.out (with -memprofilerate 512) to write a
// heap profile while the objects are alive, to see where the bytes go.
// The master copies each key into its arena, so the figure includes the
// key's bytes (13 for these keys); the test keeps no keys of its own, so the
// heap objects, scannable bytes and GC time are the master's alone.
func TestObjectMemory(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("memory measurement: not in -short or -race runs")
	}
	n := 500_000
	if s := os.Getenv("MOONCAKE_MEM_OBJECTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("MOONCAKE_MEM_OBJECTS=%q: want a positive count", s)
		}
		n = v
	}
	const size = 64
	per := headerLen(fmt.Sprintf("obj/%09d", 0)) + size
	before := liveHeap()
	objsBefore, scanBefore := heapObjects()
	m, _ := newTestMaster(t, Config{Durable: true, ClientTTL: time.Hour}, map[string]uint64{"seg": uint64(n)*per + 1<<20})
	for i := range n {
		k := fmt.Sprintf("obj/%09d", i)
		if _, err := m.PutStart("writer", k, size, ReplicateConfig{}); err != nil {
			t.Fatal(err)
		}
		if err := m.PutEnd("writer", k, 42); err != nil {
			t.Fatal(err)
		}
	}
	after := liveHeap()
	objsAfter, scanAfter := heapObjects()
	if path := os.Getenv("MOONCAKE_MEM_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cpu0 := gcCPU()
	t0 := time.Now()
	runtime.GC()
	gc, cpu := time.Since(t0), gcCPU()-cpu0
	t.Logf("%d objects: %.1f B of heap per object (the key's 13 bytes included), %.3f heap objects and %.1f B of scannable heap per object",
		n, float64(after-before)/float64(n), (float64(objsAfter)-float64(objsBefore))/float64(n), (float64(scanAfter)-float64(scanBefore))/float64(n))
	t.Logf("a forced GC: %v wall, %.0f ms of GC CPU (%.0f ns per object), GOMAXPROCS %d",
		gc.Round(time.Millisecond), cpu*1e3, cpu*1e9/float64(n), runtime.GOMAXPROCS(0))
	// 146 B at 500k objects when written: a guard, not the figure.
	if per := float64(after-before) / float64(n); per > 180 {
		t.Errorf("%.1f B of heap per object, want at most 180", per)
	}
	if got := m.Stats().Objects; got != n {
		t.Fatalf("%d objects stored, want %d", got, n)
	}
	runtime.KeepAlive(m)
}

// heapObjects is the number of live heap objects and the scannable heap
// bytes, as of the last GC.
func heapObjects() (objects, scan uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/objects:objects"}, {Name: "/gc/scan/heap:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// gcCPU is the CPU time the GC has spent so far, in seconds (updated at the
// end of each cycle).
func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64()
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestObjectLayout keeps the object record at 96 bytes (master.go): one
// more field or some padding costs every object 8 bytes.
func TestObjectLayout(t *testing.T) {
	if got, want := unsafe.Sizeof(object{}), uintptr(96); got > want {
		t.Fatalf("object is %d bytes, want at most %d", got, want)
	}
}
