package store

import (
	"context"
	"sync"
	"unsafe"

	"github.com/kvcache-go/mooncake/internal/offsetalloc"
)

// staging hands out pieces of the client's registered staging buffer. When
// it is full, take waits (bounded by ctx) until a piece is returned.
type staging struct {
	buf []byte

	mu      sync.Mutex
	a       *offsetalloc.Allocator
	changed chan struct{} // made by a take that waits, closed (and forgotten) by the next put back
}

func newStaging(buf []byte) *staging {
	return &staging{buf: buf, a: offsetalloc.New(uint64(len(buf)), offsetalloc.DefaultAlign)}
}

// take returns n bytes of staging memory; ok is false when n can never fit.
func (s *staging) take(ctx context.Context, n int) ([]byte, error) {
	if uint64(n) > s.a.Size() {
		return nil, ErrBufferTooSmall
	}
	for {
		s.mu.Lock()
		off, ok := s.a.Alloc(uint64(n))
		if ok {
			s.mu.Unlock()
			return s.buf[off : off+uint64(n) : off+uint64(n)], nil
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}

func (s *staging) put(b []byte) {
	if len(b) == 0 {
		return
	}
	off := uint64(uintptr(unsafe.Pointer(&b[0])) - uintptr(unsafe.Pointer(&s.buf[0])))
	s.mu.Lock()
	s.a.Free(off, uint64(len(b)))
	if s.changed != nil { // someone waits for room
		close(s.changed)
		s.changed = nil
	}
	s.mu.Unlock()
}
