package transfer

import (
	"errors"

	"github.com/kvcache-go/mooncake/internal/grant"
)

// Capability checks (Config.Grants).
//
// The check lives where memory is touched on behalf of a peer: the TCP lane
// server (internal/transport/tcp) verifies each grant a peer installs on a
// lane once (HMAC, expiry, segment name) and then checks every READ and
// WRITE slice against the lane's verified grants with a few comparisons,
// before the registry's bounds check and before any byte moves. A refused
// WRITE's payload is drained unread into a discard buffer; a refused READ
// sends no byte. The initiator's task fails with ErrDenied, the lane
// keeps serving.
//
// Shared memory cannot be checked per request: a peer that mapped a memfd
// can touch every byte of it with plain loads and stores. An engine with
// grants therefore advertises none of its buffers as shareable and refuses
// map requests, so same-host peers use TCP to it; for the same reason it
// publishes no CUDA IPC handles of its device buffers. Its own outgoing
// transfers (to peers without grants) may still use shared memory. A
// device buffer's transfer staged through host memory carries the
// request's grant on every staged piece.

// ErrDenied: the peer checks grants and no valid grant covered the remote
// extent (none sent, forged, expired, revoked, another segment's, or one
// that does not cover it in that mode). Nothing was read or written.
var ErrDenied = errors.New("transfer: remote extent not granted")

// GrantStats returns the counters of the engine's grant verifier (zero
// without one): grants verified and refused, requests denied.
func (e *Engine) GrantStats() grant.Stats {
	if e.cfg.Grants == nil {
		return grant.Stats{}
	}
	return e.cfg.Grants.Stats()
}
