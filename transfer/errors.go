package transfer

import "errors"

// Sentinel errors; test with errors.Is.
var (
	// ErrOutOfBounds: the peer's (or, in process, the target's) bounds check
	// rejected the remote range: zero length, overflow, not inside one
	// registered buffer, or not registered at all.
	ErrOutOfBounds = errors.New("remote address outside the peer's registered memory")
	// ErrUnknownSegment: no such segment, or it could not be reached to open.
	ErrUnknownSegment = errors.New("unknown segment")
	// ErrTimeout: the transfer's deadline passed.
	ErrTimeout = errors.New("transfer timed out")
	// ErrClosed: the engine is closed.
	ErrClosed = errors.New("engine closed")
	// ErrAuth: the peer refused our secret, or we refused its.
	ErrAuth = errors.New("authentication failed")
	// ErrPeerDown: the connection to the peer broke.
	ErrPeerDown = errors.New("peer down")
	// ErrNotRegistered: a local address is not in locally registered memory.
	ErrNotRegistered = errors.New("local memory not registered")
	// ErrChecksum: a slice's CRC32C did not match.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrInvalid: a malformed request (zero length, bad opcode, ...).
	ErrInvalid = errors.New("invalid request")
	// ErrCanceled: the transfer was canceled (Wait's context, Free).
	ErrCanceled = errors.New("transfer canceled")
)
