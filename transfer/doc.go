// Package transfer is the Mooncake transfer engine in Go: it moves bytes
// between registered memory of processes with batched READ/WRITE requests.
//
// # Model
//
// One Engine per process (more are fine in tests). Its segment is named
// "host:rpcport" (Name). Memory is registered with RegisterBytes (a Go
// slice) or Register (raw address + length, for bindings), or allocated with
// AllocateManaged (memfd-backed, so same-host peers can map it). A Request
// names a local address inside a locally registered buffer, a remote segment
// (SegmentID from OpenSegment), a remote address inside ONE buffer that the
// peer registered, and a length. Submit starts a batch and returns at once;
// Status polls each task (Mooncake's states), Wait blocks until every task
// ended and returns the first failure, Free releases the batch. Transfer is
// all three, and runs the local copies (shared memory, in process) on the
// caller's goroutine; TransferUntil is Transfer with a deadline of its own, which
// costs no timer when the batch's copies run inline (small local copies). When Wait returns, the engine no longer touches the batch's
// memory, even after a timeout.
//
// # Scatter-gather
//
// A Request with Extents moves many (local, remote, length) ranges as ONE
// request: one task and one status, bounds-checked extent by extent, with
// overlapping destinations refused at Submit and extents adjacent on both
// sides merged (vector.go). Shared memory maps the peer's buffers the
// extents lie in once and copies each extent; in process every extent is
// acquired before any moves; TCP cuts the extents into slices of at most
// SliceSize bytes and wire.MaxExtents extents, each one OpReadV/OpWriteV
// (merging ranges adjacent on either side), so blocks scattered over the
// peer's memory cost one round trip per slice instead of one per block. A
// peer whose lanes do not offer scatter-gather (an older engine) gets the
// same bytes as plain slices, each checked on its own. Coalesce turns runs
// of plain requests into scatter-gather ones (the store's batches use it;
// the P/D planner builds them directly).
//
// # Transports
//
// Config.Transport chooses: "tcp" always TCP; "inproc" copies directly
// between engines in this process that share Config.InprocHub (required
// then; there is no process-wide hub); "auto" (default) and "shm" use shared
// memory for a peer on the same host when the remote buffer is a managed
// (memfd) buffer, and TCP otherwise. Batch.Transport(i) says which served.
//
// Inside, every transport sits behind one small interface (transport.go):
// each opened segment holds one handle per transport, tried in order of
// preference, and the first that claims a request moves it (TCP, last,
// claims everything). Submit runs in phases: check the requests and pin
// local memory, route each to a transport, fix the deadline, start the
// transports' jobs, arm the deadline's timer. One behaviour suite
// (TestTransportBehaviour) runs against tcp, shm and inproc.
//
// PreparePeer readies the engine for a peer ahead of its first transfer:
// it (re)fetches the peer's descriptor, maps its shareable buffers over
// shared memory and dials TCP lanes for the rest. Without it, transfers do
// the same on first use; a request naming memory the cached descriptor does
// not list (the peer registered it later) refetches the descriptor (at most
// twice a second) before choosing shared memory or TCP.
//
// TCP (internal/transport/tcp): the RPC port also accepts data lanes. Each
// peer gets Config.Lanes bulk lanes plus one express lane for small slices,
// so a small transfer never waits behind a large stream. Requests are cut
// into Config.SliceSize slices spread over the lanes; any number of slices
// are in flight per lane (pipelined, with request ids); WRITE payloads are
// sent straight from the registered source with writev and READ payloads are
// read straight into the registered destination. Config.Checksum adds a
// CRC32C per slice, end to end. Config.LinkRate (bytes/s) paces the WRITE
// payloads the engine sends over TCP with a token bucket shared by all its
// lanes (golang.org/x/time/rate, burst Config.LinkBurst): a lane waits for a
// batch's bytes before sending it, so the engine behaves as if behind a
// link of that bandwidth (benchmarks: `mooncake bench pd --link-rate`).
//
// # GPU memory
//
// With Config.Device (a *cuda.Driver), device memory is registered
// (RegisterDevice, or Register of a device address) and moved like host
// memory, never dereferenced: a request whose local side is device memory
// is staged through a registered pinned arena in chunks, the GPU copy of
// one chunk overlapping the host transfer of the next (cuda.Stage); lanes
// serving this engine's device memory stage it through pinned buffers
// (tcp.Stager); a same-host peer's device memory is opened with CUDA IPC
// (its handle is in the descriptor) and copied device to device; an
// in-process peer's is copied directly (device.go, device_ipc.go).
//
// # Sources
//
// RegisterSource registers a range of addresses that is not memory,
// served by a Source (a storage node's disk tier): peers READ it like
// memory, on the same lanes, with the same bounds checks, and the lane
// serving a slice asks the source for its bytes (source.go). WRITEs to
// it are refused. A Source that is also a Prefetcher is told, before a
// TCP lane serves a READ of its range, the ranges of that READ and of the
// READs queued behind it on the lane (in order, granted, each once), so
// it can read them while the lane sends.
//
// # Discovery
//
// Config.Metadata "P2PHANDSHAKE" (default): OpenSegment("host:port") asks
// the peer's RPC port for its descriptor (Mooncake's handshake framing: u64
// length + type byte + JSON). "http://h:p/metadata" and "etcd://h:p": the
// engine publishes its descriptor under mooncake/ram/<segment> and peers read
// it there.
//
// # Integrity and security
//
// Every incoming request is checked against the registry (package
// internal/transport/registry): [addr, addr+len) must lie inside ONE
// registered buffer, with non-zero length and no overflow; otherwise the
// initiator's task fails with ErrOutOfBounds and the lane keeps serving.
// Unregister waits for transfers using the buffer; later ones are rejected.
// Frames are bounded (MaxFrame for control, MaxSlice for data); a peer that
// sends garbage loses its connection, nothing else. With Config.Secret set,
// every connection must open with HMAC-SHA256(secret, nonce) (ErrAuth
// otherwise), where the nonce carries a timestamp: a proof older than two
// minutes, or one already seen, is refused, so a recorded handshake cannot
// be replayed. The secret is never sent; the data itself is not encrypted.
//
// With Config.Grants (a grant.Verifier, package internal/grant) the engine
// checks capabilities too: each incoming READ/WRITE must lie inside a grant
// for this segment, of its mode, unexpired (and, one-shot, still live),
// that the peer sent on the same lane (Request.Grant); otherwise the
// initiator's task fails with ErrDenied and nothing is touched. The lane
// verifies a grant once and then checks slices against its verified
// grants; such an engine offers no shared memory (grants.go).
//
// # Failure
//
// Every batch has a deadline: the ctx deadline given to Submit, or
// Config.Timeout. When it passes, lanes still carrying the batch are closed
// and its unfinished tasks end with StatusTimeout/ErrTimeout. A peer that
// dies fails the slices in flight to it with ErrPeerDown; the next Submit to
// it dials again. Close fails everything in flight with ErrClosed and waits
// for every goroutine.
//
// # Status of this package
//
// Done: the API of helpers/transfer-api.md; GPU memory (staged, CUDA IPC,
// in process); in-process, TCP (lanes,
// pipelining, slicing, express lane, writev, checksums, secrets) and shared
// memory (memfd + SCM_RIGHTS, TCP fallback) transports; P2P handshake, HTTP
// metadata and etcd discovery; bounds checking; deadlines. Not done: RDMA,
// Mooncake's buddy allocator for managed buffers (each AllocateManaged is
// its own memfd), retries of failed slices on other lanes. docs/transfer.md
// has the design and the figures.
package transfer
