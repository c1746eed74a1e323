// Package tcp is the transfer engine's TCP data path: the lane server that
// applies peers' READ/WRITE slices to registered memory, and the client Peer
// that spreads slices over several lanes (TCP connections) to one peer.
//
// Wire format: package wire (32-byte request header, 24-byte response
// header, payload after a WRITE request or an OK READ response).
//
// Server (ServeLane): one goroutine per lane reads request headers in order.
// Every request is bounds-checked by the Memory it is given (one registered
// buffer, non-zero length); a WRITE payload is read straight from the socket
// into the registered destination. READ responses are gathered: while more
// request headers are already buffered, each READ's response header (and a
// payload up to 16 KiB, copied) joins an outbox and a larger payload is
// referenced in place; the outbox goes out as one writev (net.Buffers)
// straight from registered memory when no whole request header is buffered,
// when 1 MiB of payload is gathered, or before a WRITE is served (so no
// span is held while the lane waits for input). Before, every READ slice
// was its own writev, taking the bulk token each time. Rejected WRITE
// payloads are drained so the lane stays in sync. A header that does not
// decode, or a slice longer than MaxSlice, ends the lane: the caller closes
// the connection and keeps serving others. Response headers are batched and
// flushed when the lane has no more input.
//
// Scatter-gather (vector.go): an OpReadV/OpWriteV request names many
// ranges of registered memory with one header and one response. The lane
// decodes its extent table (wire.DecodeExtents), checks grants for every
// extent, then acquires every extent before any byte moves: one outside
// registered memory rejects the whole request (a WRITE's payload is
// drained, nothing is written) and the lane keeps serving. The client's
// Op carries the remote extents (Ext) and its local pieces (Vec), which
// need not line up; the writer sends the pieces with the header in one
// writev, the reader reads a READ's payload into them in order. Peers
// whose handshake did not offer scatter-gather (Peer.Vectored false) get
// no such op.
//
// Lookahead (prefetch.go): a Memory that is a Prefetcher (a transfer
// engine with a disk tier registered as a source) is told, before the
// lane serves a READ, that READ's ranges and those of the READs whole in
// the lane's input buffer behind it, up to the first WRITE, covered by
// the grants the lane holds (checked without counting denials); each
// request is looked at once.
//
// Grants (ServerConfig.Grants): an OpGrant request carries an encoded grant
// (internal/grant) and gets no response; the server verifies it once and
// keeps it in the lane's grant.Set, and answers StatusDenied to every READ
// or WRITE no kept grant covers, before touching memory. The client sends
// an Op's Grant in front of its slice unless the lane sent that grant
// (the same bytes) among its last grant.SetSize, which the server keeps,
// padded to a multiple of wire.GrantAlign so
// that the slice's payload lands as aligned in the server's buffer as it
// would without it. Between large WRITEs (whose headers are read straight
// from the socket) the server reads a grant and the header behind it from
// the socket too, so its reader does not read ahead into the payload.
//
// Client (Peer): lane 0 is the express lane, used only by small slices
// (<= SmallMax) so that a small transfer never queues behind a large stream;
// small slices go to whichever lane has the fewest bytes queued, large ones to
// the least-loaded bulk lane; a slice with a grant goes to the grant's
// home lane (chosen by its bytes) when nothing is queued there, so that a
// grant used again finds the lane that sent it. Each lane has a writer goroutine (gathers queued
// slices into one writev) and a reader goroutine (matches responses, which
// come back in order, and reads READ payloads straight into the local
// destination). Any number of slices may be in flight per lane.
//
// Bulk tokens: ServerConfig.Bulk and PeerConfig.Bulk are semaphores an engine
// shares across its lanes. A server lane holds one while it moves a payload
// larger than BulkMin, a client lane's writer while it writes large payloads;
// client readers never wait for one (that could deadlock two engines sending
// READs and WRITEs to each other). With GOMAXPROCS-1 tokens a P stays free to
// poll the network, so the express lane is served within microseconds even
// while bulk lanes stream (the Go scheduler otherwise notices network
// readiness only when a P runs out of work, or every 10 ms). A lane must move
// its payload within BulkStall while holding a token, or it is dropped.
//
// Failure: when a lane breaks (peer died, protocol error, Fail called on a
// deadline) the connection is closed, both goroutines exit, and only then are
// the queued and in-flight slices completed with the error, so once an Op is
// completed the lane never touches its buffer again. A lane that fails is
// closed abortively (SO_LINGER 0: the kernel drops its send queue and
// resets the connection), so a failed WRITE's bytes not yet delivered
// never reach the peer later (a peer that stopped answering and comes
// back would otherwise get the kernel's retransmissions after the
// initiator was told the write failed).
package tcp
