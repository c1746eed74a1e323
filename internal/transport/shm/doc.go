// Package shm is the shared-memory transport for peers on the same host.
//
// An engine's managed buffers are memfd-backed (Alloc). Its Server listens on
// an abstract unix socket (SOCK_SEQPACKET, so every message keeps its
// boundaries); a peer's Client connects, proves the shared secret when one is
// set, and asks for the buffer that contains an address. The server answers
// with the buffer's base, length and id, and passes the memfd itself
// (SCM_RIGHTS). The client maps it MAP_SHARED once and caches the mapping, so
// a transfer is then one memcpy between the local buffer and the mapping,
// bounds-checked against the mapped buffer.
//
// The mapping is made with MAP_POPULATE: its page tables are filled when it
// is made (the whole buffer, once per peer buffer) rather than by a fault on
// the first touch of each page. BenchmarkFirstWrite: mapping a fresh 1.5 MB
// buffer and writing it took 0.21-0.30 ms populated against 0.68-0.78 ms
// lazy (the write alone 35-41 us against 594-708 us; 25-35 us already
// mapped), on the 2-core development machine at load average 2.4-3.2.
//
// When the owner frees a managed buffer it pushes a revoke for its id to
// every connected client; the client drops the mapping from its cache and
// unmaps it when the last copy using it ends. A copy racing with the revoke
// lands in the orphaned memfd pages, never in memory the owner still uses.
// Memory that is not managed (a plain Go slice) cannot be shared this way:
// the server answers "not shareable" and the engine falls back to TCP.
//
// Messages are small JSON objects (Msg), one per packet, at most MaxMsg bytes.
package shm
