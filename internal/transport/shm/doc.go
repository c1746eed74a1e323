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
// Mapping policy. A peer's buffer is mapped lazily, never MAP_POPULATE:
// a storage node's segment is GiBs, and populating it costs time in
// proportion to its size and allocates every page of the owner's memfd
// that is still a hole (on a memfd a fault on a hole allocates the page,
// a read fault too), so the owner's memory would be its whole segment as
// soon as one client mapped it. Instead a span of at least 64 KiB is
// populated when Acquire or AcquireMapped hands it out
// (MADV_POPULATE_READ over the 64 KiB chunks it touches: on shared memory
// read faults map the pages writable, 16 per fault), and a bitmap of the
// chunks populated so far keeps that to the first span over each chunk.
// A shorter span faults on each page it touches (at most 17). The owner's
// memory therefore grows with what copies touch, and at most a chunk more
// at either end of a span. Kernels without MADV_POPULATE_READ (before
// 5.14) fault page by page.
//
// BenchmarkFirstOp (a new client: dial, map, write 1.5 MB at the middle of
// the peer's buffer, whose pages the owner holds) and BenchmarkWarmCopy
// (copies into spans touched already), in one run on the 2-core
// development machine at load average 2.1-2.6, -benchtime=5x:
//
//	peer buffer   MAP_POPULATE       lazy, span populated   populate/lazy
//	4 GiB         2.51 s, 4096 MiB   0.42 ms, 1.5 MiB       ~5900x
//	1 GiB         589 ms, 1024 MiB   0.25 ms, 1.5 MiB       ~2400x
//	64 MiB        37.8 ms, 64 MiB    0.25 ms, 1.5 MiB       ~150x
//	1.5 MiB       0.35 ms            0.21 ms                1.6x
//
// (the first operation's time, and the owner's memfd bytes in memory
// after it). Mapped lazily without populating the span, the 1.5 MB write
// alone took 9-14x as long as into a populated span (438-660 us against
// 45-52 us), the whole first operation 2-4x. In the steady state the
// policy adds nothing measurable: a copy into a span populated already
// took 1.0x, 1.0x and 0.8x the time without the policy (64 KiB, 1.5 MB
// and 16 MB).
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
