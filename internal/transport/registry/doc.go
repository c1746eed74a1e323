// Package registry is the bounds-checking core of the transfer engine: the
// set of memory buffers a process has registered, and the only way any
// transport may touch that memory.
//
// A Registry holds non-overlapping buffers, each a []byte (either a Go slice
// the caller registered, or a slice built over raw memory the bindings
// handed us). Every access goes through Acquire(addr, n), which succeeds only
// when [addr, addr+n) lies inside ONE registered buffer: zero length, integer
// overflow, a range that starts before or ends after a buffer, or one that
// spans two adjacent buffers is rejected with ErrOutOfBounds; an address in
// no buffer gets ErrNotRegistered. A successful Acquire returns a Span whose
// bytes stay valid until Span.Release: Unregister removes the buffer at once
// (new Acquires fail) and then waits until every Span on it is released, so
// after Unregister returns no transport reads or writes that memory again.
//
// Device memory (GPU memory, RegisterDevice) is registered by address and
// length only, with its device ordinal: the registry never makes bytes of
// it. Acquire refuses it (ErrDevice), so a transport that does not know
// device memory fails the request instead of touching it; AcquireAny
// returns a device span (Span.Device) for callers that copy with the
// driver, and Span.Staged shows a host copy of it under the same
// acquisition.
//
// The registry does no I/O and never logs; it is safe for concurrent use.
// Lookups take a read lock and a binary search over the sorted buffers.
package registry
