// Package store is the client library of the Mooncake Store in Go: a
// distributed key-value pool of memory contributed by storage nodes (and,
// optionally, by clients), with a master that holds only metadata.
//
// # Data path
//
// The master never carries values. A put is one pipeline (put.go): it
// reserves space (PutStart: one replica per distinct segment, best effort;
// or a put slot, below), writes the object header (durable masters) and
// the value to every replica's segment memory with the transfer engine (one
// batched WRITE), then commits it with its CRC32C (PutCommit); a failed
// write revokes the space (PutRevoke). A get asks for the replica list (GetReplicaList, which grants a
// read lease, 10s by default), READs the first replica (one held by this
// process's engine first; from 1 MiB as 4 parts in flight together, each
// part checksummed as it arrives), verifies the CRC32C and, when the read fails or
// the checksum does not match, tries the next replica. Corrupt data is never
// returned: if every replica is corrupt the error wraps ErrCorrupt. A read
// that outlives its lease fails with ErrLeaseExpired (the space may have been
// reused); retry it.
//
// Values are staged through a registered buffer (Config.LocalBufferSize);
// from 64 KiB the caller's slice (Put) or the result slice (Get) is
// registered for the transfer instead, so no extra copy is made. PutFrom and
// GetInto move bytes straight from/to memory the caller registered with
// RegisterBuffer (zero copy, as Mooncake's put_from/get_into).
// PutFromDevice, GetIntoDevice and their batch forms take GPU memory
// (Config.Device, a *cuda.Driver): the value is copied between the device
// and host memory with the driver and put or read, and checksummed, there
// (device.go).
//
// When the master signs data-path grants (internal/grant), every replica
// it hands out carries one (pb.Replica.Grant) and the client sends it with
// the transfers to that replica (transfer.Request.Grant); storage nodes
// that check grants refuse transfers without one (docs/security.md).
//
// # Liveness
//
// The client pings the master every PingInterval. When the master answers
// NEED_REMOUNT (it restarted, or dropped the client after its TTL), the
// client remounts its segment. With a durable master (the default of
// `mooncake master`) every put also writes the object's header (package
// internal/objheader) in front of the value, in the same transfer batch;
// a remounting client scans its segment (in pieces, over GOMAXPROCS
// goroutines, a bounded number of pieces ahead of the calls) and reports
// the objects it holds in bounded chunks as the
// scan finds them, up to the master's window of calls in flight
// (remount.go), so the restarted master serves them again; a node pings
// at once when its connection to the master comes back (pingwake.go); removes zero the headers of
// the removed objects before returning, and the client zeroes the
// tombstones its pings bring (durable.go). A non-durable restarted master
// has no objects: gets of earlier keys fail with ErrNotFound, never stale.
// Master calls wait for the connection and retry while the master is
// unreachable, within RPCTimeout.
//
// Config.Segment contributes memory the caller owns (under Config.SegmentName)
// instead of allocating SegmentSize: the Python binding mounts extra segments
// of one process this way (Mooncake's mount_segment), one client each on a
// shared engine, and CloseWithGrace unmounts one with the caller's grace.
//
// # Master transports
//
// The hot calls (PutStart, PutCommit, PutRevoke, GetReplicaList, Exist and
// the batch calls of puts, gets and existence) go over a fastrpc connection
// (package internal/fastrpc) to the master's gRPC port when Config.Master is
// a plain host:port and the master answers its preface; everything else, HA
// addresses, Config.NoFastRPC, and any call the fast connection could not
// send or lost (a master restart) go over gRPC (fastmaster.go). Both
// transports carry the same calls and messages; the choice is made once,
// when the client is made, and the put pipeline sees only the putRPC
// interface (reserve, commit, revoke). A 4 KiB get is one master round trip
// plus one transfer. Clients share fast connections through a ConnPool
// (Config.ConnPool; by default the process-wide DefaultConnPool), which
// keeps one per P (GOMAXPROCS, at most 8) per master address and hands them
// to clients in turn, so concurrent calls of several clients share system
// calls at both ends. A hot call is bounded by RPCTimeout (or ctx's deadline when sooner)
// without a context of its own: the fast path passes the deadline to
// fastrpc.Client.CallBy, only the gRPC fallback makes a context. A get's
// read is bounded by its lease through transfer.Engine.TransferUntil
// (Movers without it get a context with the lease's deadline).
//
// # Put slots
//
// A slot is a way to reserve space. A small put (under 64 KiB, without
// placement wishes) committed on the fast path asks its PutCommit to also
// reserve a slot: space for the client's next put of the same size, key
// length and policy. That put writes into the slot and commits it with the
// same PutCommit, with no PutStart, so a stream of small puts costs one
// master round trip each (slot.go). Over gRPC no slot is asked for. The master refuses a slot older than a
// version of the key (the put is then made the usual way), and a commit the
// key's rules refuse has its header zeroed before the put returns, so no
// refused value can come back after a master restart. A client holds at most
// 8 slots, uses one only while the connection it came on is live and for
// 10 s (timed by Config.Clock), and gives them back on Close; the master
// frees them with the client.
//
// A storage node passes its disk tier as Config.Disk (DiskTier, disk.go):
// the client then copies the objects the master offloads from its segment
// to disk (one batch write per ping answer), registers the tier's range
// with its engine (DiskSource), and any client reads a key held only on
// disk with a READ of that range on the node's engine, in the same
// transfer batch as memory replicas for a batch get (diskbatch.go), over
// HTTP when the copy has no address; it checks the CRC32C and, when the
// node asks for promotion on hit, puts the value back into memory. A
// batch get's first reads are one transfer (batchpipe.go says why not
// groups).
//
// # Hot cache
//
// Config.HotCache (Mooncake's local hot cache; MC_STORE_LOCAL_HOT_* via
// HotCacheFromEnv) keeps the values of frequently read keys in this
// process's memory, bounded by HotCache.Size, admitted by frequency
// (package internal/hotcache: a count-min sketch behind a doorkeeper). A
// get of a held key still asks the master, naming the version it holds
// (KeyRequest.cached_view and cached_seq: the master's incarnation and the
// put's sequence number); when that is the key's current version the master
// answers unchanged (no replicas, no lease) and the value is copied from the
// cache, otherwise the answer is the usual replica list and the key is read
// remotely (and the stale entry dropped). So a served value was the key's
// value when the master answered, and every overwrite or removal, by any
// client, acknowledged before the get began is seen. Batch gets name one
// version per key. The client's own puts and removes drop their entries at
// once (memory freed early). Values held in the client's own segment are not
// cached. HotCacheStats counts hits, misses, stale entries and latency
// (internal/storeprom exports them to Prometheus). The master answers
// unchanged from GetReplicaListIf (internal/master); an older master answers
// as before and nothing is served from the cache.
//
// # Replica clear and copy/move tasks
//
// BatchReplicaClear drops replicas of keys this client put (all, or those
// on one segment). CreateCopyTask and CreateMoveTask ask the master for a
// task and return its id at once (QueryTask, WaitTask follow it); the task
// runs on the client that owns the source segment: every client with a
// segment fetches its tasks after each ping and copies header and value
// from its own memory to the targets, CRC32C checked, in one transfer
// batch (tasks.go).
//
// With several masters (`mooncake master --ha`), Config.Master may name the
// cluster as "etcd://h1:2379;h2:2379[/CLUSTER]": the client then follows the
// leader elected in etcd (its resolver is package internal/leader), and a
// failover looks like a master restart: the client remounts and the new
// leader learns the objects from the nodes' reports.
//
// # Dependencies
//
// The client links no server code: it speaks to the master through the wire
// and leaf packages only (internal/storepb for the RPC, internal/storeerr for
// the error sentinels and Mooncake's code table, internal/leader for HA
// addresses, which uses the etcd client but not the etcd server, and
// internal/offsetalloc for its staging buffer), plus the transfer engine.
// It never imports internal/master, internal/election or
// go.etcd.io/etcd/server; TestDeps checks this with `go list -deps`.
//
// # Example
//
//	eng, _ := transfer.Open(ctx, transfer.Config{})
//	defer eng.Close()
//	c, err := store.New(ctx, store.Config{Master: "127.0.0.1:50051", Mover: eng})
//	if err != nil { ... }
//	defer c.Close()
//	err = c.PutWith(ctx, "prefix/abc", value, store.PutOptions{Replicas: 2})
//	v, err := c.Get(ctx, "prefix/abc")
//	if errors.Is(err, store.ErrNotFound) { ... }
//
// Errors from the master are *RemoteError values carrying Mooncake's numeric
// code (OBJECT_NOT_FOUND -704, OBJECT_HAS_LEASE -706, ...) and unwrapping to
// the sentinels ErrNotFound, ErrExists, ErrHasLease, ErrNoSpace, ErrTooLarge,
// ErrInvalid and ErrLeaseExpired (the sentinels of internal/storeerr, so the
// master's errors.Is checks and the client's agree).
//
// Tenants and TLS (docs/security.md): Config.Token is the client's tenant
// credential, sent with every gRPC call and once per fastrpc connection
// (the pool keeps connections of different credentials apart); the master
// then scopes every key to the tenant, and a put over the tenant's quota
// fails with ErrQuotaExceeded (TENANT_QUOTA_EXCEEDED -1700). A refused
// credential is ErrUnauthorized on every call. With a durable master the
// object header carries the key as the master stores it (the namespace
// PutStartResponse.key_prefix names, in front). Config.TLS reaches the
// master over TLS (no same-host socket then).
package store
