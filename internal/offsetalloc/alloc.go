package offsetalloc

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
)

// DefaultAlign is the allocation granularity (one cache line).
const DefaultAlign = 64

// Allocator manages the offsets [0, Size) of one region.
type Allocator struct {
	size  uint64
	align uint64
	used  uint64

	byStart map[uint64]extent    // start -> length and place in its bucket
	byEnd   map[uint64]uint64    // end -> start
	buckets map[uint64]*[]uint64 // length -> starts (a pointer: appends need no map store)
	lengths []uint64             // sorted distinct lengths with a non-empty bucket
	spare   []*[]uint64          // emptied buckets, reused (with their capacity) for new lengths
}

// extent is a free extent's length and its index in its length's bucket.
// One map holds both, so an insert or remove touches three maps, not four
// (a 4 KiB put's allocation and free were a tenth of the master's CPU).
type extent struct {
	length uint64
	pos    int
}

// New returns an allocator for size bytes with the given alignment (a power
// of two; 0 means DefaultAlign). The usable size is size rounded down to the
// alignment.
func New(size, align uint64) *Allocator {
	if align == 0 {
		align = DefaultAlign
	}
	if align&(align-1) != 0 {
		panic(fmt.Sprintf("alloc: alignment %d is not a power of two", align))
	}
	a := &Allocator{
		size:    size &^ (align - 1),
		align:   align,
		byStart: map[uint64]extent{},
		byEnd:   map[uint64]uint64{},
		buckets: map[uint64]*[]uint64{},
	}
	if a.size > 0 {
		a.insert(0, a.size)
	}
	return a
}

// Rounded is the number of bytes an allocation of n bytes occupies.
func (a *Allocator) Rounded(n uint64) uint64 { return (n + a.align - 1) &^ (a.align - 1) }

// Size is the usable size of the region.
func (a *Allocator) Size() uint64 { return a.size }

// Used is the number of bytes currently allocated (after rounding).
func (a *Allocator) Used() uint64 { return a.used }

// Free is the number of bytes not allocated.
func (a *Allocator) FreeBytes() uint64 { return a.size - a.used }

// LargestFree is the length of the largest free extent.
func (a *Allocator) LargestFree() uint64 {
	if len(a.lengths) == 0 {
		return 0
	}
	return a.lengths[len(a.lengths)-1]
}

// Extents is the number of free extents (a fragmentation measure).
func (a *Allocator) Extents() int { return len(a.byStart) }

// Alloc reserves n bytes (n > 0) and returns their offset; ok is false when no
// free extent is large enough.
func (a *Allocator) Alloc(n uint64) (off uint64, ok bool) {
	if n == 0 {
		return 0, false
	}
	need := a.Rounded(n)
	if need < n { // overflow
		return 0, false
	}
	i := sort.Search(len(a.lengths), func(i int) bool { return a.lengths[i] >= need })
	if i == len(a.lengths) {
		return 0, false
	}
	length := a.lengths[i]
	b := *a.buckets[length]
	start := b[len(b)-1]
	a.remove(start, length)
	if length > need {
		a.insert(start+need, length-need)
	}
	a.used += need
	return start, true
}

// Free returns the range [off, off+n) obtained from Alloc(n). Freeing a range
// that is not allocated panics: it is a bug in the caller.
func (a *Allocator) Free(off, n uint64) {
	size := a.Rounded(n)
	end := off + size
	if n == 0 || end > a.size || off%a.align != 0 {
		panic(fmt.Sprintf("alloc: free of invalid range [%d,+%d)", off, n))
	}
	if _, dup := a.byStart[off]; dup {
		panic(fmt.Sprintf("alloc: double free at %d", off))
	}
	a.used -= size
	start := off
	if prev, ok := a.byEnd[off]; ok { // a free extent ends where we start
		a.remove(prev, a.byStart[prev].length)
		start = prev
	}
	if next, ok := a.byStart[end]; ok { // a free extent starts where we end
		a.remove(end, next.length)
		end += next.length
	}
	a.insert(start, end-start)
}

func (a *Allocator) insert(start, length uint64) {
	a.byEnd[start+length] = start
	b := a.buckets[length]
	if b == nil {
		if n := len(a.spare); n > 0 {
			b, a.spare = a.spare[n-1], a.spare[:n-1]
		} else {
			b = new([]uint64)
		}
		a.buckets[length] = b
		i, _ := slices.BinarySearch(a.lengths, length)
		a.lengths = slices.Insert(a.lengths, i, length)
	}
	a.byStart[start] = extent{length: length, pos: len(*b)}
	*b = append(*b, start)
}

func (a *Allocator) remove(start, length uint64) {
	i := a.byStart[start].pos
	delete(a.byStart, start)
	delete(a.byEnd, start+length)
	bp := a.buckets[length]
	b := *bp
	if last := b[len(b)-1]; last != start {
		b[i] = last
		a.byStart[last] = extent{length: length, pos: i}
	}
	*bp = b[:len(b)-1]
	if len(*bp) == 0 {
		delete(a.buckets, length)
		if len(a.spare) < 64 {
			a.spare = append(a.spare, bp)
		}
		j, _ := slices.BinarySearch(a.lengths, length)
		a.lengths = slices.Delete(a.lengths, j, j+1)
	}
}

// Range is an allocated byte range [Off, Off+Len).
type Range struct{ Off, Len uint64 }

// NewAllocated returns an allocator for size bytes (as New) in which the
// given ranges are already allocated, as if by Alloc, and the gaps between
// them are free: it rebuilds a region's allocator from what is known to
// live in it. Ranges must be aligned, inside the region and not overlap;
// their order does not matter. Each is later freed with Free(Off, Len).
func NewAllocated(size, align uint64, used []Range) (*Allocator, error) {
	a := New(size, align)
	rs := slices.Clone(used)
	slices.SortFunc(rs, func(x, y Range) int { return cmp.Compare(x.Off, y.Off) })
	if a.size > 0 {
		a.remove(0, a.size)
	}
	var pos uint64
	for _, r := range rs {
		n := a.Rounded(r.Len)
		if r.Len == 0 || r.Off%a.align != 0 || r.Off < pos || r.Off+n > a.size || r.Off+n < r.Off {
			return nil, fmt.Errorf("alloc: range [%d,+%d) misaligned, overlapping or outside %d bytes", r.Off, r.Len, a.size)
		}
		if r.Off > pos {
			a.insert(pos, r.Off-pos)
		}
		a.used += n
		pos = r.Off + n
	}
	if pos < a.size {
		a.insert(pos, a.size-pos)
	}
	return a, nil
}

// FreeAt is the length of the free extent starting exactly at off (0 when
// none starts there).
func (a *Allocator) FreeAt(off uint64) uint64 { return a.byStart[off].length }

// AllocAt reserves the n bytes at off (aligned) if they are free, as Alloc
// would have; it reports whether it did. It finds the free extent holding
// off in O(1) when one starts at off, else by a scan of the free extents.
func (a *Allocator) AllocAt(off, n uint64) bool {
	need := a.Rounded(n)
	if n == 0 || off%a.align != 0 || off+need < off || off+need > a.size {
		return false
	}
	start, length := off, a.byStart[off].length
	if length == 0 {
		start = ^uint64(0)
		for s, e := range a.byStart {
			if s <= off && off < s+e.length {
				start, length = s, e.length
				break
			}
		}
		if start == ^uint64(0) {
			return false
		}
	}
	if off+need > start+length {
		return false
	}
	a.remove(start, length)
	if off > start {
		a.insert(start, off-start)
	}
	if end := start + length; off+need < end {
		a.insert(off+need, end-off-need)
	}
	a.used += need
	return true
}
