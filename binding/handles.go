package main

import (
	"sync"
)

// handles maps the int64 ids handed to C callers to Go values, so no Go
// pointer ever crosses the ABI. Ids start at 1 and are never reused; 0 and
// negative ids are never valid.
type handles[T any] struct {
	mu   sync.RWMutex
	next int64
	m    map[int64]T
}

func newHandles[T any]() *handles[T] {
	return &handles[T]{m: make(map[int64]T)}
}

// add stores v and returns its new id.
func (h *handles[T]) add(v T) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	h.m[h.next] = v
	return h.next
}

// get returns the value of id.
func (h *handles[T]) get(id int64) (T, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	v, ok := h.m[id]
	return v, ok
}

// remove deletes id and returns its value; a second remove reports false.
func (h *handles[T]) remove(id int64) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[id]
	delete(h.m, id)
	return v, ok
}

// len reports how many ids are live.
func (h *handles[T]) len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.m)
}
