package store

import (
	"sync"
	"unsafe"
)

// grantStrings interns the READ grants the master hands out
// (pb.Replica.Grant) as strings: the master hands a hot extent's grant out
// again while it has
// long enough to live, and a transfer lane sends a grant once and then
// recognises it by its string data, so the same bytes must become the same
// string. Bounded: past maxGrantStrings it starts over.
type grantStrings struct {
	mu sync.Mutex
	m  map[string]string
}

const maxGrantStrings = 1024

// of returns b as a string, the same string for the same bytes.
func (g *grantStrings) of(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.m[string(b)]; ok {
		return s
	}
	if g.m == nil || len(g.m) >= maxGrantStrings {
		g.m = make(map[string]string, 64)
	}
	s := string(b)
	g.m[s] = s
	return s
}

// grantString is b (a grant of a decoded master reply) as a string without
// a copy: the bytes of a decoded reply are never written again.
func grantString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
