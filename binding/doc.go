// Command binding is the C ABI of Mooncake in Go: built with
//
//	go build -buildmode=c-shared -o python/mooncake/_lib/libmooncake.so ./binding
//
// it exports plain C functions (prefix mc_) over the transfer engine
// (package transfer) and the store client (package store). The Python package
// in python/mooncake loads the library with ctypes; any other language with a
// C FFI can use it the same way.
//
// # Conventions
//
//   - Go values never cross the boundary. Engines, stores and async batches are
//     int64 handles (1, 2, ...; never reused; 0 and negatives are invalid).
//   - Every function returns an int64: >= 0 is success (or a value: a size,
//     a count, a handle), negative is one of Mooncake's error codes
//     (-1 internal, -101 segment not found, -600 invalid parameters,
//     -704 object not found, -705 exists, -706 has lease, -800 transfer
//     failed, -900 RPC failed, -901 RPC timeout). Address-returning functions
//     return 0 on failure.
//   - The reason of a failure is logged on stderr (log/slog text, level from
//     MC_LOG_LEVEL: debug, info, warn (default), error) and kept for
//     mc_last_error.
//   - Nothing panics across the boundary: every export runs under a recover
//     that turns a panic into -1.
//   - Byte results (a stored value, notifications as JSON) are returned through
//     a void** out parameter as a malloc'd buffer the caller frees with mc_free.
//   - Local addresses handed to a transfer must lie inside memory registered
//     with this engine (or allocated by it); others are refused with -600
//     before anything touches them, so a wrong pointer is an error, not a crash.
//
// # Transfer engine
//
//	int64 mc_engine_open(host, metadata, protocol, device)  -> handle
//	int64 mc_engine_close(h)
//	int64 mc_engine_rpc_port(h)
//	int64 mc_engine_name(h, char *buf, int64 cap)           -> length of "host:port"
//	int64 mc_engine_register(h, addr, len, location) / mc_engine_unregister(h, addr)
//	uint64 mc_engine_alloc_managed(h, len) / int64 mc_engine_free_managed(h, addr)
//	int64 mc_engine_transfer(h, target, op, n, locals, remotes, lengths) -> 0 | -1 (sync)
//	int64 mc_engine_submit(h, target, op, n, locals, remotes, lengths)   -> batch id
//	int64 mc_batch_wait(h, n, ids)   -> 0 | -1 (waits, frees)
//	int64 mc_batch_check(h, id)      -> 1 done | 0 running | -1 failed | -2 timeout
//	int64 mc_engine_probe(h, peer); uint64 mc_engine_first_buffer(h, segment)
//	int64 mc_engine_notify(h, peer, name, msg, len); mc_engine_notifies(h, void **out)
//	int64 mc_engine_topology(h, void **out)  -> JSON: name, rpc_port, buffers
//
// The metadata argument takes P2PHANDSHAKE (or empty), http://h:p/path (the
// HTTP metadata service, e.g. `mooncake metadata-server`), etcd://h:p[,h:p...]
// and a bare h:p[,h:p...] (etcd, Mooncake's default scheme; ';' also
// separates endpoints). The scheme is case-insensitive; redis://, https://
// and other schemes are refused with -600. With a metadata service the engine
// publishes its segment there at open (an unreachable service fails the open)
// and peers find it by name ("host:rpcport").
//
// The protocol argument takes tcp, shm, auto and inproc; Mooncake's RDMA-family
// names (rdma, efa, nvlink, ...) fall back to tcp with a warning, so that
// existing configurations run unchanged (Mooncake's own choice when it
// finds no RDMA device); with MC_FORCE_HCA=1 they fail instead, as in
// Mooncake. device is accepted and ignored.
// Transfers time out after MC_TRANSFER_TIMEOUT seconds (default 30, min 5)
// plus one nanosecond per byte, as in Mooncake.
//
// # Store client
//
//	int64 mc_store_open_ex(host, metadata, global_segment_size, local_buffer_size,
//	                       protocol, device, master, options_json) -> handle
//	int64 mc_store_put_ex(h, key, ptr, size, config_json); mc_store_get(h, key, void **out)
//	int64 mc_store_get_into(h, key, ptr, size) -> bytes read
//	mc_store_batch_put_ex, mc_store_batch_get_into, mc_store_exist, mc_store_batch_exist,
//	mc_store_get_size, mc_store_stat (JSON: size, replicas), mc_store_remove,
//	mc_store_batch_remove, mc_store_remove_regex, mc_store_remove_all,
//	mc_store_list (JSON array of keys), mc_store_hostname, mc_store_health, mc_store_close
//	mc_store_register_buffer(h, ptr, size), mc_store_unregister_buffer(h, ptr)
//
// config_json is Mooncake's ReplicateConfig as the Python layer sends it
// (putConfigJSON: replica_num, soft_pin, soft_pin_ttl_ms, with_hard_pin,
// preferred_segments, prefer_alloc_in_same_node, upsert, keep_soft_pin; ""
// for the defaults).
//
// Each store client owns a transfer engine (protocol as above) that always
// uses the P2P handshake: storage nodes and clients are reached directly by
// their "host:port" segment names, so the metadata argument of
// mc_store_open_ex is ignored with a warning (Mooncake configurations often
// name an HTTP or etcd metadata server). A put of a key that exists returns
// 0 and keeps the stored value (Mooncake's put; the Go client reports
// ErrExists); an upsert replaces it. Memory registered with
// mc_store_register_buffer is sent and received in place; other memory of
// 64 KiB or more is registered for the duration of one call, smaller values
// go through the client's staging buffer. A batch (mc_store_batch_put_ex,
// mc_store_batch_get_into) whose buffers all lie in registered memory is
// one batched put or read (one master call for every key, one transfer
// batch), sent from and received into place: the store client's view of the
// engine accepts registrations nested in a registered range (nestedMover).
// Other batches run key by key, 8 at a time.
//
// # Replica clear and copy/move tasks
//
//	int64 mc_store_replica_clear(h, n, keys, segment, void **out) -> JSON array of the keys cleared
//	int64 mc_store_create_copy_task(h, key, n, targets, uint64 id[2])
//	int64 mc_store_create_move_task(h, key, source, target, uint64 id[2])
//	int64 mc_store_query_task(h, id_hi, id_lo, void **out) -> JSON of the task (store_tasks.go)
//
// Task failures carry Mooncake's codes (-1400 task not found, -1401 too many
// pending tasks, -1010 a target being unmounted). A dummy handle forwards the
// task calls to its real client; its replica clear answers -1012.
//
// # SSD offload and extra segments
//
//	int64 mc_store_disk_reads(h)   (values read from disk tiers)
//	int64 mc_store_mount_segment(h, path, offset, size, void **out_ids_json)
//	int64 mc_store_allocate_segment(h, size, uint64 *allocated, void **out_ids_json)
//	int64 mc_store_unmount_segments(h, ids_json, grace_ms)
//
// mc_store_open_ex's options_json {"disk": {"dir", "capacity",
// "offload_on_evict", "promotion_on_hit"}} puts the storage node's disk tier (internal/disktier)
// behind the client's segment, its reads served on a port of the client's
// host (store_disk.go); {"env": {"MC_STORE_LOCAL_HOT_CACHE_SIZE": ...}}
// carries Mooncake's hot-cache variables as Python saw them at setup (the
// library falls back to its own environment), which configure the store
// client's hot cache (store.HotCacheFromEnv). {"tenant_id", "token", "tls",
// "grant_key_file"} are the client's security settings, each defaulting to
// its MOONCAKE_* variable (store_security.go); with a grant key the client
// signs the proofs of mount of its segments (a master with data-path grants
// asks them) and its engine checks grants on every incoming READ and WRITE,
// as a storage node's does. Extra segments (store_segments.go) are a file's bytes
// (mmap) or new memory, each mounted by a store client of its own on the
// handle's engine under a Mooncake UUID string; unmounting is that client's
// graceful close, then munmap.
//
// # Dummy clients
//
//	int64 mc_store_open_dummy(pool_size, local_buffer_size, real_client_addr) -> handle
//	void *mc_store_alloc_from_pool(h, size)   (NULL when not a dummy or used up)
//
// A dummy handle (Mooncake's setup_dummy) takes every mc_store_* call above,
// served by the real client (`mooncake client`) on this host through
// internal/dummyclient; its pool is shared memory both processes map, and
// buffers in it move without a copy.
//
// # RPC messages, segment info, gather copy
//
//	int64 mc_rpc_server_open(listen_addr, timeout_s) -> handle; mc_rpc_server_port(h); mc_rpc_server_close(h)
//	int64 mc_rpc_recv(h, wait_ms, void **out)  -> 0 none | length (kind u8 | source len u16 | source | data)
//	int64 mc_rpc_client_open(pool, timeout_s) -> handle; mc_rpc_client_close(h)
//	int64 mc_rpc_send(h, target, kind, ptr, n) -> 0 queued by the target | -900
//	int64 mc_engine_segment(h, segment, void **out) -> JSON [{addr, length, location}] of a peer
//	int64 mc_store_get_ranges(h, key, n, uint64 *offs, void **ptrs, uint64 *lens) -> 0 | code
//	int64 mc_gather_copy(dst, dst_len, n, void **srcs, uint64 *sizes, threads) -> bytes copied
//
// The RPC message transport (rpcmsg.go) carries Mooncake's engine
// RpcInterface: framed messages over TCP, queued for the receiving process,
// which takes them with mc_rpc_recv. mc_gather_copy is mooncake._fast_copy.
// mc_store_get_ranges reads byte ranges of a value into registered memory
// (store.Client.GetRanges; EngramStore's lookups).
//
// The Python package (python/mooncake, docs/python.md) maps these onto
// Mooncake's TransferEngine and MooncakeDistributedStore methods.
//
// # Testing
//
// The Go tests cover the pure parts (handles, address ranges, error codes,
// argument translation, the engine and store layer below the cgo wrappers);
// python/tests drive the built library end to end from real Python processes.
package main
