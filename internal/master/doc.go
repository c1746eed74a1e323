// Package master is the Mooncake Store master: it holds object metadata
// (key -> replicas on segments), allocates segment space, grants read
// leases, evicts, and tracks client liveness. It never carries object data;
// clients move bytes to and from segment memory with the transfer engine.
//
// # Core and shell
//
// Master is the deterministic core. It does no I/O: time comes from an
// injected clock.Clock (internal/clock) and periodic work (client TTL, put
// timeouts, graceful unmounts, watermark eviction) runs when the shell calls
// Tick. It is tested with a fake clock and no sockets. Its files follow its
// concerns: master.go (types, constructor), objtab.go (the object table:
// records, key arena, hash index), segments.go (mount, unmount,
// drain), segobjects.go (each segment's list of its objects), liveness.go (ping, Tick and its phases), placement.go (where
// replicas go), put.go (PutStart/PutEnd/PutRevoke/Upsert, put timeouts),
// lease.go (reads: GetReplicaList grants leases, Query and Exist do not),
// exist.go (BatchExist: keys hashed before the lock, probed in slices),
// remove.go (single and chunked bulk removal), evict.go, list.go (the
// ordered index of visible keys and List; index_parts.go: its key ranges
// and parallel inserts), stats.go, summary.go (state at
// a glance per tier, for the dashboard), counts.go (the gauges kept
// current), shrink.go (maps and the object table compacted after mass removal), restore.go
// (durable metadata: Restore), tombs.go (tombstones, their index by key,
// Heartbeat), scrub.go (Config.Scrub: freed extents zeroed by their node
// before another tenant gets them, and held from the others while a grant
// on them may live; Scrub), disk.go (the nodes' disk tiers: offload
// tombstones, disk copies, DiskSync), events.go (EventSink),
// replicaclear.go (BatchReplicaClear), tasks.go (copy and move tasks:
// CreateCopyTask, CreateMoveTask, QueryTask, FetchTasks, FinishTask),
// drainjobs.go (drain jobs over move tasks: CreateDrainJob, DrainJobInfo,
// SegmentDrainStatus; a segment in a job takes no new replicas) and
// softpin.go (Mooncake's soft-pin actions on an upsert: ENABLE, DISABLE,
// PRESERVE).
//
// The process shell around it (gRPC and fastrpc services, admin HTTP, the
// ticker that drives Tick) is package internal/masterserver, which uses
// only the core's exported API.
//
// # Semantics (Mooncake Store's, with the deviations noted)
//
//   - Segments: a client mounts segments it contributes (name, transfer
//     engine endpoint, base address, size). Each has its own best-fit offset
//     allocator (package internal/offsetalloc) with 64-byte granularity, so
//     objects of one size fill a segment completely. As in Mooncake (which
//     keys segments by UUID), segments of different clients (different
//     endpoints) may share a name: each has an internal key (its name for
//     the first, "name#N" for the others), a client has at most one segment
//     per name, and a segment from the endpoint of another client's segment
//     of that name replaces it (a restarted node). Whatever takes a segment
//     name (preferred segments, replica clear, copy/move targets and
//     sources) means every segment under it.
//   - Put: PutStart allocates the replicas on segments of distinct names
//     (Mooncake groups its allocators by name; preferred names first, the
//     caller's own segment first under a shared name, then by strategy:
//     random, free_ratio_first, local_first); the replica count is best
//     effort (at least one). The
//     object is invisible until PutEnd, which records the value's CRC32C.
//     PutRevoke abandons a put. A put of an existing key fails with
//     ErrObjectExists; Upsert replaces the value (in place when the size is
//     unchanged). A put unfinished after PutTimeout (30s) may be preempted by
//     a new put of the key; its space is held until PutReleaseTimeout (10m)
//     since its writer may still be writing, or freed at once when its owner
//     has been dropped.
//   - Put slots (slot.go): PutReserve gives a client space for its next
//     small put (an unfinished put of a placeholder key, SlotPrefix...), and
//     PutCommit makes the slot, once written, the key's object: a put in one
//     round trip. A commit is refused when the key has a version at least as
//     new as the slot's sequence number (the client then puts the usual
//     way), and by the key's rules (exists, leased, put in progress), which
//     free the slot and return its tombstone for the client to zero.
//     On the wire (internal/masterserver) one PutCommit call ends every put:
//     without a slot it is PutEnd, with one PutCommit, and either may also
//     ask for PutReserve; CommitNext does both in one hold of the lock,
//     what needs no lock (the clock, the keys' hashes, the next slot's
//     name and replica list) done before it is taken.
//     When the commit replaces an unleased version of the slot's size and
//     header length, that version's space is the next slot (slot_reuse.go:
//     no tombstone, no allocation); a key whose older header lies in such a
//     slot revokes the slot when its version goes (remove, eviction), so a
//     restore never brings that header back.
//   - Get: GetReplicaList returns the replicas and the CRC and grants a read
//     lease (10s). Remove, RemoveByRegex and RemoveAll skip or refuse leased
//     objects (ErrObjectHasLease) unless forced; eviction never takes a
//     leased object. Exist grants no lease (Mooncake's does), so that a stat
//     followed by rm works. Every answer carries the value's version (View:
//     this master's incarnation; Seq: the put's sequence number, new for
//     every put, upsert and slot commit); GetReplicaListIf (cached.go), for a
//     client whose hot cache holds a version, answers Unchanged without
//     replicas or a lease while that version is current.
//   - Eviction: when used/capacity passes HighWatermark (0.90) at a Tick, or
//     a PutStart finds no space on a segment that takes new objects
//     (synchronously, then retried once; none when every segment is being
//     restored, drained or evacuated: ErrNoSpace at once), about
//     EvictionRatio (5%) of the capacity is freed in the order of
//     Config.EvictionPolicy (internal/evict: "lru", the default,
//     "tail-first", or "retention", which orders as "tail-first" here),
//     skipping leased, unfinished and hard-pinned objects;
//     soft-pinned objects (pin TTL 30m by default, 24h max) go only after
//     all others. TailFirst knows the store connector's block keys (ChainOf,
//     chain.go): the keys of one batch call (a batch put's end, a batch get,
//     BatchExist) form one recency group, each with its position as its
//     depth, and the least recent group goes first, deepest block first, so
//     a chain shrinks from its tail; other keys go in LRU order.
//   - Liveness: clients Ping (recorded without mu); a closing client Leaves;
//     one silent past ClientTTL (10s) is dropped, its
//     segments unmounted and the replicas on them removed (objects left
//     without replicas disappear). A client the master does not know, after
//     a master restart, gets PingNeedRemount and remounts its segments with
//     RemountSegments. Without Config.Durable the restarted master has no
//     objects, so no stale replica can be served.
//     Config.Logger hears each drop at INFO (client, segments, replicas
//     lost), each unmount, and the Server logs "master stopped" on shutdown.
//   - Durable metadata (Config.Durable, restore.go): allocations start with
//     an objheader the client writes with the value; a remounting node
//     reports what its memory holds and the master rebuilds the segment
//     (newest sequence number wins; keys removed on this master stay
//     removed); a freed object's header stays allocated as a tombstone
//     until it is zeroed (by the removing client, or by the node after
//     Heartbeat lists it; Heartbeat takes the zeroed ones back 512 per hold
//     of the lock), so removed objects are never re-reported. The
//     reports come in bounded chunks through a restore session
//     (restore_session.go: RestoreBegin, RestoreChunk, RestoreEnd; Restore
//     runs one whole), decided in offset order as they arrive, at most
//     RestoreChunkObjects per hold of the lock; up to RestoreWindow chunks
//     may be in flight (RestoreChunkContext: an early one waits for its
//     turn, decoded, outside the lock; its keys are hashed outside the
//     lock too; their keys' inserts in the listing index are made after
//     each part by the index's goroutine under the index's own lock, on
//     other cores, while the next part is decided: the index is cut in
//     key ranges at the restore's keys, and a part's inserts run on
//     several goroutines, each in ranges of its own), and RestoreExpect
//     sizes the object table and the segments' object lists from the
//     session's announced total; the segment takes no new
//     objects until its session ends. A session idle for ClientTTL, or
//     replaced by the client's next remount, is dropped with the segments
//     it left half restored (their objects not counted as removed), and
//     the next remount starts over.
//   - Events (events.go): an optional EventSink hears Stored/Removed per
//     tier (Mooncake's enable_kv_events).
//   - List (not in Mooncake): keys by prefix in key order with a cursor,
//     over the ordered index (B-trees of the visible keys by key range,
//     walked in order), the lock held
//     for at most listHold keys at a time, yielding between holds. The
//     index has a lock of its own, taken after the Master's (lock order:
//     Master.mu, keyIndex.mu, keyIndex.qmu); every use of it under the
//     Master's lock first makes the restore's queued inserts (list.go).
//
// # Bounded work
//
// No call holds the lock for work that grows with the pool. Ping and a
// heartbeat's sign of life take only liveMu (the client table; last-seen
// times are atomics), never mu. Bulk removal runs in chunks
// (RemovePageFrom: at most RemoveChunk removals and removeScan keys
// passed per hold of the lock, a cursor to go on). Stats and Summary read
// counters kept current where objects change (counts.go): O(segments).
// Above evictExact objects an eviction samples (evict.go). Tombstones are
// indexed by key. Maps are rebuilt when they fall to an eighth of their
// peak (shrink.go). Restart recovery decides a node's re-report in parts
// of RestoreChunkObjects per hold of the lock (restore_session.go). What
// stays O(objects of one segment) under the lock: unmounting a segment
// (also a segment a dropped restore session left half restored).
//   - Replica clear (Mooncake's BatchReplicaClear): a client drops the
//     replicas of keys it put, all of them or those on one segment, skipping
//     keys in use (leased, or accessed within LeaseTTL) and unfinished ones.
//   - Copy and move tasks (Mooncake's task manager): a task is assigned to
//     the client owning the source segment, which fetches it (the target
//     space is allocated then), copies the bytes and finishes it; the
//     replicas are added only if the object is still the version copied.
//     Deadlines, retries and limits are Mooncake's defaults (tasks.go).
//
// # Memory
//
// The master's memory is its objects' metadata, held without a pointer per
// object (objtab.go): a 96-byte record stored by value in chunks and named
// by a 32-bit ID (times are Unix nanoseconds, the owner's client ID is
// interned, the first replica is inline; TestObjectLayout keeps it at 96),
// the key's bytes in an arena, an 8-byte slot of the open-addressing hash
// index, a 4-byte item of the listing B-tree (list.go; 8 bytes more once
// the key is upserted: an entry that an upsert's new version takes over in
// place) and of its segment's object list (segobjects.go: unmounting a
// segment walks only its own objects): about 145 bytes of Go heap per
// object with a 13-byte key.
// TestObjectMemory measures it. A collection marks a few large blocks
// whatever the number of objects; process RSS is about (1 + GOGC/100)
// times the live heap, and the mooncake master command sets GOGC from the
// live heap (about 16 MiB or 5% of garbage between collections) unless the
// environment sets GOGC (docs/store.md, "Master memory per object").
//
// Errors are sentinels (ErrObjectNotFound, ...) wrapped with context; they
// are defined in internal/storeerr, shared with the store client, and Code
// maps them to Mooncake's numeric codes at the gRPC edge.
package master
