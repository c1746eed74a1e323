package master

// Go maps keep their size after their entries are deleted: after a mass
// removal the master would hold the memory of its peak for good. shrinkLocked
// rebuilds a map once it holds at most an eighth of its peak, so the copy
// (O(what is left)) is paid for by the removals before it, and the memory of
// the rest goes back to the heap (and, by the runtime's scavenger, to the
// system).

// shrinkMin is the peak below which maps are left alone.
const shrinkMin = 8192

// shrinkLocked compacts the object table (objTable.compact), rebuilds the
// pending and per-segment tombstone maps that fell far below their peak,
// and the segments' object lists that fill at most an eighth of their
// capacity.
func (m *Master) shrinkLocked() {
	m.objects.compact()
	m.peaks.pending = shrunk(&m.pending, m.peaks.pending)
	m.peaks.tombIdx = shrunk(&m.tombIdx, m.peaks.tombIdx)
	for _, s := range m.segOrder {
		s.objects = shrunkSlice(s.objects)
		s.peaks.tombs = shrunk(&s.tombs, s.peaks.tombs)
	}
}

// mapPeaks are the largest sizes of maps since they were last rebuilt.
type mapPeaks struct {
	pending, tombIdx, tombs int
}

// shrunk rebuilds *mp when it holds at most an eighth of peak, and returns
// the peak to remember.
func shrunk[K comparable, V any](mp *map[K]V, peak int) int {
	n := len(*mp)
	if n > peak {
		return n
	}
	if peak < shrinkMin || n > peak/8 {
		return peak
	}
	c := make(map[K]V, n)
	for k, v := range *mp {
		c[k] = v
	}
	*mp = c
	return n
}

// shrunkSlice is s reallocated to its length when it fills at most an
// eighth of a capacity of at least shrinkMin, else s.
func shrunkSlice[T any](s []T) []T {
	if cap(s) < shrinkMin || len(s) > cap(s)/8 {
		return s
	}
	return append([]T(nil), s...)
}
