package main

import (
	"fmt"
	"sort"
	"sync"
)

// regions is the set of address ranges a caller registered, used to refuse a
// local address outside registered memory before the engine dereferences it
// (a bad pointer from Python must become an error code, not a crash).
type regions struct {
	mu sync.RWMutex
	rs []region // sorted by addr, non-overlapping
}

type region struct {
	addr, length uint64
}

// add inserts [addr, addr+length); it fails on zero length, overflow or
// overlap with a range already present.
func (s *regions) add(addr, length uint64) error {
	if addr == 0 || length == 0 {
		return errInvalid(fmt.Sprintf("empty or null range 0x%x+%d", addr, length))
	}
	if addr+length < addr {
		return errInvalid(fmt.Sprintf("range 0x%x+%d overflows", addr, length))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.rs), func(i int) bool { return s.rs[i].addr >= addr })
	if i < len(s.rs) && s.rs[i].addr < addr+length {
		return errInvalid(fmt.Sprintf("range 0x%x+%d overlaps a registered range", addr, length))
	}
	if i > 0 && s.rs[i-1].addr+s.rs[i-1].length > addr {
		return errInvalid(fmt.Sprintf("range 0x%x+%d overlaps a registered range", addr, length))
	}
	s.rs = append(s.rs, region{})
	copy(s.rs[i+1:], s.rs[i:])
	s.rs[i] = region{addr, length}
	return nil
}

// remove deletes the range starting at addr and returns its length.
func (s *regions) remove(addr uint64) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.rs), func(i int) bool { return s.rs[i].addr >= addr })
	if i == len(s.rs) || s.rs[i].addr != addr {
		return 0, false
	}
	n := s.rs[i].length
	s.rs = append(s.rs[:i], s.rs[i+1:]...)
	return n, true
}

// contains reports whether [addr, addr+length) lies inside one range.
func (s *regions) contains(addr, length uint64) bool {
	if length == 0 || addr+length < addr {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.rs), func(i int) bool { return s.rs[i].addr > addr })
	if i == 0 {
		return false
	}
	r := s.rs[i-1]
	return addr+length <= r.addr+r.length
}

// all returns a copy of the ranges in address order.
func (s *regions) all() []region {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]region(nil), s.rs...)
}
