package offsetalloc

import (
	"math/rand/v2"
	"testing"
)

func TestAllocFreeTable(t *testing.T) {
	tests := []struct {
		name     string
		size     uint64
		allocs   []uint64
		wantOK   []bool
		wantUsed uint64
	}{
		{"exact fill", 256, []uint64{64, 64, 64, 64}, []bool{true, true, true, true}, 256},
		{"rounding", 320, []uint64{1, 65, 100}, []bool{true, true, true}, 64 + 128 + 128},
		{"too big", 128, []uint64{129}, []bool{false}, 0},
		{"zero", 128, []uint64{0}, []bool{false}, 0},
		{"overflow after fill", 128, []uint64{64, 64, 1}, []bool{true, true, false}, 128},
		{"size rounded down", 100, []uint64{64, 1}, []bool{true, false}, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := New(tc.size, 64)
			for i, n := range tc.allocs {
				_, ok := a.Alloc(n)
				if ok != tc.wantOK[i] {
					t.Fatalf("alloc %d (%d bytes): ok=%v want %v", i, n, ok, tc.wantOK[i])
				}
			}
			if a.Used() != tc.wantUsed {
				t.Fatalf("used=%d want %d", a.Used(), tc.wantUsed)
			}
		})
	}
}

func TestCoalesce(t *testing.T) {
	a := New(1024, 64)
	var offs []uint64
	for range 16 {
		o, ok := a.Alloc(64)
		if !ok {
			t.Fatal("alloc failed")
		}
		offs = append(offs, o)
	}
	if _, ok := a.Alloc(1); ok {
		t.Fatal("alloc on a full region succeeded")
	}
	// Free every other block, then the rest: the region must come back whole.
	for i := 0; i < 16; i += 2 {
		a.Free(offs[i], 64)
	}
	if a.LargestFree() != 64 || a.Extents() != 8 {
		t.Fatalf("largest=%d extents=%d", a.LargestFree(), a.Extents())
	}
	for i := 1; i < 16; i += 2 {
		a.Free(offs[i], 64)
	}
	if a.Extents() != 1 || a.LargestFree() != 1024 || a.Used() != 0 {
		t.Fatalf("after free all: extents=%d largest=%d used=%d", a.Extents(), a.LargestFree(), a.Used())
	}
}

func TestBestFit(t *testing.T) {
	a := New(64*10, 64)
	o1, _ := a.Alloc(64 * 3) // [0,3)
	_, _ = a.Alloc(64)       // [3,4)
	o3, _ := a.Alloc(64)     // [4,5)
	_, _ = a.Alloc(64)       // [5,6) ; [6,10) free
	a.Free(o1, 64*3)
	a.Free(o3, 64)
	// Free: [0,3) len 3, [4,5) len 1, [6,10) len 4. A 1-block alloc must take the hole of 1.
	o, ok := a.Alloc(64)
	if !ok || o != o3 {
		t.Fatalf("best fit took %d, want %d", o, o3)
	}
	o, ok = a.Alloc(64 * 3)
	if !ok || o != o1 {
		t.Fatalf("best fit took %d, want %d", o, o1)
	}
}

func TestFreeInvalidPanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(a *Allocator)
	}{
		{"double free", func(a *Allocator) { o, _ := a.Alloc(64); a.Free(o, 64); a.Free(o, 64) }},
		{"out of range", func(a *Allocator) { a.Free(1024, 64) }},
		{"misaligned", func(a *Allocator) { a.Free(3, 64) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tc.f(New(1024, 64))
		})
	}
}

// TestRandomisedInvariants checks, under random alloc/free, that allocations
// never overlap, stay in range, and that used+free bytes always add up.
type blk struct{ off, n uint64 }

func TestRandomisedInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	a := New(1<<20, 64)
	live := map[uint64]blk{}
	for i := 0; i < 20000; i++ {
		if r.IntN(3) > 0 || len(live) == 0 {
			n := uint64(r.IntN(8192) + 1)
			off, ok := a.Alloc(n)
			if !ok {
				continue
			}
			if off+n > a.Size() {
				t.Fatalf("out of range: %d+%d", off, n)
			}
			live[off] = blk{off, n}
		} else {
			for k, b := range live {
				a.Free(b.off, b.n)
				delete(live, k)
				break
			}
		}
		if i%1000 == 0 {
			checkNoOverlap(t, a, live)
		}
	}
	var sum uint64
	for _, b := range live {
		sum += a.Rounded(b.n)
	}
	if sum != a.Used() {
		t.Fatalf("used=%d sum of live=%d", a.Used(), sum)
	}
	var free uint64
	for start, e := range a.byStart {
		free += e.length
		if b := a.buckets[e.length]; b == nil || e.pos >= len(*b) || (*b)[e.pos] != start {
			t.Fatalf("extent at %d (length %d) is not at index %d of its bucket", start, e.length, e.pos)
		}
	}
	if free != a.FreeBytes() {
		t.Fatalf("free extents=%d FreeBytes=%d", free, a.FreeBytes())
	}
}

func checkNoOverlap(t *testing.T, a *Allocator, live map[uint64]blk) {
	t.Helper()
	used := make([]bool, a.Size()/64)
	mark := func(off, length uint64) {
		for i := off / 64; i < (off+length)/64; i++ {
			if used[i] {
				t.Fatalf("overlap at block %d", i)
			}
			used[i] = true
		}
	}
	for _, b := range live {
		mark(b.off, a.Rounded(b.n))
	}
	for s, e := range a.byStart {
		mark(s, e.length)
	}
	for i, u := range used {
		if !u {
			t.Fatalf("block %d neither free nor allocated", i)
		}
	}
}

// TestUtilisationSameSize: objects of one size fill the region completely.
func TestUtilisationSameSize(t *testing.T) {
	a := New(1<<24, 64)
	for {
		if _, ok := a.Alloc(4096); !ok {
			break
		}
	}
	if a.Used() != a.Size() {
		t.Fatalf("utilisation %d/%d", a.Used(), a.Size())
	}
}

func BenchmarkAllocFree(b *testing.B) {
	a := New(1<<30, 64)
	offs := make([]uint64, 0, 1024)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if len(offs) == cap(offs) {
			for _, o := range offs {
				a.Free(o, 4096)
			}
			offs = offs[:0]
		}
		o, _ := a.Alloc(4096)
		offs = append(offs, o)
	}
}

func TestNewAllocated(t *testing.T) {
	a, err := NewAllocated(1024, 64, []Range{{512, 100}, {0, 64}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Used() != 64+128 || a.Extents() != 2 || a.LargestFree() != 512-64 {
		t.Fatalf("used %d extents %d largest %d", a.Used(), a.Extents(), a.LargestFree())
	}
	a.Free(512, 100)
	a.Free(0, 64)
	if a.Used() != 0 || a.Extents() != 1 {
		t.Fatalf("after free: used %d extents %d", a.Used(), a.Extents())
	}
	for _, bad := range [][]Range{{{0, 128}, {64, 64}}, {{1, 64}}, {{1000, 64}}, {{0, 0}}} {
		if _, err := NewAllocated(1024, 64, bad); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
}

func TestAllocAt(t *testing.T) {
	a := New(1024, 64)
	if !a.AllocAt(128, 100) || a.Used() != 128 || a.Extents() != 2 {
		t.Fatalf("alloc at 128: used %d extents %d", a.Used(), a.Extents())
	}
	if a.AllocAt(192, 64) || a.AllocAt(64, 128) || a.AllocAt(1000, 64) {
		t.Fatal("allocated over a used range")
	}
	if a.FreeAt(256) != 1024-256 || !a.AllocAt(256, 64) || !a.AllocAt(0, 64) {
		t.Fatal("adjacent allocations")
	}
	a.Free(128, 100)
	a.Free(256, 64)
	a.Free(0, 64)
	if a.Used() != 0 || a.Extents() != 1 {
		t.Fatalf("after free: used %d extents %d", a.Used(), a.Extents())
	}
}
