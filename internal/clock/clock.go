// Package clock is the one time source the project's pure cores take: an
// interface with the real wall clock and a manual fake for tests.
//
// Cores (the master's allocator and leases, the P/D connector state
// machines, the proxy's policies, the engine server) take a Clock in their
// config and call Now; they never call time.Now themselves. Tests hand them a
// *Fake and move time with Advance, so lease expiry and timeouts are tested
// instantly and deterministically.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Or returns c, or the real clock when c is nil: the default a config applies.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Fake is a manual clock for tests; safe for concurrent use. The zero value
// starts at the zero time; NewFake starts at a given instant.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a fake clock reading t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Set moves the fake to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}
