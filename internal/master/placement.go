package master

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// checkFitsLocked fails with ErrNoSpace when no segment is mounted and
// with ErrObjectTooLarge when size exceeds the largest segment.
func (m *Master) checkFitsLocked(size uint64) error {
	if len(m.segOrder) == 0 {
		return fmt.Errorf("%w: no segment mounted", ErrNoSpace)
	}
	var largest uint64
	for _, s := range m.segOrder {
		largest = max(largest, s.alloc.Size())
	}
	if size > largest {
		return fmt.Errorf("%w: %d bytes, largest segment %d", ErrObjectTooLarge, size, largest)
	}
	return nil
}

// placeOrEvictLocked places up to want replicas for a put of owner's
// (scrub.go); when none fits it reuses owner's dirty space or a
// tombstone's, then evicts synchronously and tries them once more,
// and when that fails too it asks the next Tick to evict again and fails
// with ErrNoSpace. When no segment takes new objects at all (none mounted
// yet, or all being restored after a restart, drained or evacuated) it
// fails with ErrNoSpace at once: an eviction could not make room, and
// would drop objects for nothing.
func (m *Master) placeOrEvictLocked(clientID, owner string, size uint64, want int, preferred []string, now time.Time) ([]place, error) {
	// Scrubbing: the owner's own freed bytes need no zeroing, and a tenant
	// churning its own objects recycles them before it takes zeroed space
	// others may need (scrub.go).
	if want == 1 && len(preferred) == 0 {
		if reps := m.reuseDirtyLocked(clientID, owner, size); len(reps) > 0 {
			return reps, nil
		}
	}
	if reps := m.placeLocked(clientID, size, want, preferred); len(reps) > 0 {
		return reps, nil
	}
	if reps := m.reuseDirtyLocked(clientID, owner, size); len(reps) > 0 {
		return reps, nil
	}
	// Freed objects' 64-byte tombstones (headers the node has not zeroed
	// yet) fragment the space before any eviction is due: reuse one first.
	if reps := m.reuseTombLocked(clientID, size); len(reps) > 0 {
		return reps, nil
	}
	if !m.placeableLocked() {
		return nil, fmt.Errorf("%w: %d bytes: no segment takes new objects (none mounted, or all being restored or drained)", ErrNoSpace, size)
	}
	if m.scrubbingLocked(size) { // room is coming back: evicting now would drop objects for it
		return nil, fmt.Errorf("%w: %d bytes: freed space is being zeroed by its nodes (scrubbing), retry", ErrNoSpace, size)
	}
	m.evictLocked(now, 0)
	if reps := m.placeLocked(clientID, size, want, preferred); len(reps) > 0 {
		return reps, nil
	}
	if reps := m.reuseDirtyLocked(clientID, owner, size); len(reps) > 0 { // the evicted objects' own
		return reps, nil
	}
	if reps := m.reuseTombLocked(clientID, size); len(reps) > 0 {
		return reps, nil
	}
	m.evictReq = true
	return nil, fmt.Errorf("%w: %d bytes", ErrNoSpace, size)
}

// placeableLocked reports whether some mounted segment takes new objects
// (not draining, evacuated or being restored). O(segments).
func (m *Master) placeableLocked() bool {
	return slices.ContainsFunc(m.segOrder, func(s *segment) bool {
		return !s.draining && !m.evacuatingLocked(s) && !m.restoringLocked(s)
	})
}

// placeLocked allocates up to want replicas on segments of distinct names
// (as Mooncake, whose allocators are grouped by segment name: segments of
// several clients sharing a name hold at most one replica together). A
// preferred name means any segment under it, the caller's own first.
func (m *Master) placeLocked(clientID string, size uint64, want int, preferred []string) []place {
	var reps []place
	// Names holding a replica: the replicas' own (a few). Segments tried:
	// only preferred ones can come up twice (again in the strategy's
	// order), so only they need a set; a put with no wishes makes none.
	used := func(name string) bool {
		return slices.ContainsFunc(reps, func(r place) bool { return r.seg.spec.Name == name })
	}
	var tried map[*segment]bool
	if len(preferred) > 0 {
		tried = map[*segment]bool{}
	}
	try := func(s *segment) {
		if len(reps) >= want || s == nil || s.draining || m.evacuatingLocked(s) || m.restoringLocked(s) || used(s.spec.Name) || tried[s] {
			return
		}
		if tried != nil {
			tried[s] = true
		}
		if off, ok := s.alloc.Alloc(size); ok {
			reps = append(reps, place{seg: s, off: off})
		}
	}
	for _, name := range preferred {
		named := m.namedLocked(name)
		for _, s := range named {
			if s.client == clientID {
				try(s)
			}
		}
		for _, s := range named {
			try(s)
		}
	}
	for _, s := range m.orderLocked(clientID) {
		if len(reps) >= want {
			break
		}
		try(s)
	}
	return reps
}

// orderLocked is the order in which the strategy tries segments (those
// being restored left out).
func (m *Master) orderLocked(clientID string) []*segment {
	order := slices.Clone(m.segOrder)
	if len(m.restore.segs) > 0 {
		order = slices.DeleteFunc(order, m.restoringLocked)
	}
	switch m.cfg.Strategy {
	case StrategyFreeRatioFirst:
		slices.SortStableFunc(order, func(a, b *segment) int {
			fa := float64(a.alloc.FreeBytes()) / float64(a.alloc.Size())
			fb := float64(b.alloc.FreeBytes()) / float64(b.alloc.Size())
			return cmp.Compare(fb, fa)
		})
	case StrategyLocalFirst:
		m.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		slices.SortStableFunc(order, func(a, b *segment) int {
			la, lb := a.client == clientID, b.client == clientID
			switch {
			case la && !lb:
				return -1
			case lb && !la:
				return 1
			}
			return 0
		})
	default:
		m.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	return order
}
