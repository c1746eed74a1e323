package proxy

import (
	"context"
	"sync"
	"time"
)

// lifetime is the proxy's lifetime without a stored context: work that
// outlives its request registers its cancel func, and end cancels them all
// (and any registered later at once).
type lifetime struct {
	mu      sync.Mutex
	ended   bool
	next    int
	cancels map[int]context.CancelFunc
}

// detach returns a context that keeps parent's values but not its
// cancellation, and ends after d or when the lifetime ends. Call cancel
// when the work is done.
func (l *lifetime) detach(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), d)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		cancel()
		return ctx, cancel
	}
	if l.cancels == nil {
		l.cancels = map[int]context.CancelFunc{}
	}
	id := l.next
	l.next++
	l.cancels[id] = cancel
	return ctx, func() {
		cancel()
		l.mu.Lock()
		delete(l.cancels, id)
		l.mu.Unlock()
	}
}

// end cancels every detached context, now and later.
func (l *lifetime) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	for id, cancel := range l.cancels {
		cancel()
		delete(l.cancels, id)
	}
}
