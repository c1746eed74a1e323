// Package master is the engine behind `mooncake bench master`: the store's
// master at pool scale (millions of objects), run as real processes, with
// Redis as the peer where one exists.
//
// # Processes
//
// Run starts `mooncake master --durable-metadata` (Config.Binary, on free
// 127.0.0.1 ports) and Config.Nodes `mooncake store` processes whose
// segments are sized for the run (SegmentSize: each loaded object takes
// ObjectBytes, its objheader plus value rounded up to 64 B, and the
// get/put loads' keys are added; the sum over segmentFill, plus
// segmentPad), each waited for by its first stdout line. The bench's own
// store clients (Config.Clients loaders, the first OpsClients of which
// also run the get/put load, and a control client that lists and removes)
// live in this process; the clients phase starts worker processes
// (`mooncake bench master --worker`, RunWorker). Every child gets
// Pdeathsig SIGKILL, so none outlives a killed bench, and Run stops each
// one it started on every path: clients first, then the nodes (they
// unmount), then the master. Redis is Debian's redis-server on a free
// loopback port (Config.Redis "auto"; ErrRedisMissing when not installed:
// the run goes on and Result.RedisSkipped says why), spoken to by a small
// RESP client of this package (respConn).
//
// # High availability
//
// Config.HA replaces the master by two `mooncake master --ha` candidates
// of one cluster (id bench-PID-NANOS; Config.HALease their --ha-lease),
// the first waited for until its /role says it leads; the nodes, the
// bench's clients and the workers address them as
// etcd://ENDPOINTS/CLUSTER, and the serving master's admin API is the
// leader's. The etcd is Config.Etcd: "auto" starts Debian's etcd (a single
// member, data in a temporary directory, Pdeathsig too) on free loopback
// ports and waits for its /health (ErrEtcdMissing when not installed:
// Run fails), or the endpoints of a running etcd. etcd is stopped after
// the candidates, which resign on SIGTERM. The baseline's pool is an HA
// cluster of its own (id suffix -baseline). The failover phase runs
// instead of the restart phase.
//
// # Phases
//
// The load phase always runs first; Config.Phases picks the others, which
// run in the order of AllPhases. Each has a deadline (Config.PhaseTimeout)
// and a failure is recorded in Result.Failures, the next phase still
// running; after each, the master's /api/summary is kept in Result.After
// (objects, segments, evictions, clients dropped).
//
//   - load: keys KeyFormat 0..N-1, values of Config.ValueSize bytes, by
//     BatchPut of LoadBatch keys from Config.Clients clients; puts/s, and
//     the master's VmRSS after minus before, over N (its Go heap too when
//     /metrics has go_memstats_heap_inuse_bytes). Redis: the same keys by
//     pipelined SETs from as many connections; used_memory (INFO memory)
//     after minus before, over N.
//   - ops: OpsClients clients, each alternating an upsert of one of its
//     OpsKeys put keys and a get of one of its OpsKeys get keys, OpsSize
//     bytes, for Config.Duration: ops/s and get and put p50/p99 (Hist).
//     Config.Baseline first runs the same on a fresh pool of that many
//     objects, the peer of "ops/s at N". Redis: the same load.
//   - bulk: under that load, every loaded key is listed by pages of
//     ListPage (store.Client.List with a cursor), repeated until
//     Config.Duration passed (at least once), each count checked against N,
//     while /api/summary and /dashboard/ are fetched every second; then the
//     clients dropped during the phase, the segments still mounted, and
//     BatchExist over all N keys (objects lost). Redis: SCAN under the same
//     load.
//   - remove: one RemoveByRegex of RemovePattern (the even-numbered keys)
//     with the control client: time, count, and the keys listed after
//     (also when the call failed: the master may have removed them anyway).
//   - restart: BatchExist over all keys (from every loading client, two
//     calls in flight per processor of the bench), SIGKILL of the master,
//     a new one on the same ports, then BatchExist of the missing ones
//     until all that existed before are back or Config.RestoreTimeout
//     after the kill passed (reported as not recovered, with each node's
//     last log line);
//     none of those absent before (removed, evicted) may come back. The
//     breakdown: the new master listening, every node's segment mounted
//     (its remount's first call), its /api/summary counting them all, and
//     each node's and the master's log line of the remount (the node's
//     scan and whole remount, the master's restore session and its time
//     holding the lock to decide the reports). Run after remove, it is the
//     restart after removing half the keys.
//   - failover (Config.HA): BatchExist over all keys, then the leader is
//     SIGKILLed (Config.FailoverSignal FailoverKill) or SIGSTOPped
//     (FailoverStop: a hung leader, its connections left open); the
//     election time runs until the standby's /role says it leads (polled
//     every 5 ms; it says so once its master listens and its view is in
//     etcd), the remount time until its /api/summary has every node's
//     segment, the failover time until BatchExist, through the new leader,
//     finds every object present before (or Config.RestoreTimeout after
//     the signal: not recovered, with each node's last log line); none of
//     those absent before may come back. Then two candidates again: a new
//     standby in place of a killed leader, or the stopped one resumed
//     (SIGCONT, also on every failure path), which must report follower
//     within Config.RestoreTimeout (the time it took is reported) while
//     the new leader keeps its view.
//   - removeall: RemoveAll under the get/put load: time, count, clients
//     dropped, segments, keys listed after. Redis: FLUSHALL.
//   - clients: Config.Probes worker processes, one after the other, timed
//     from their start to their first successful get (median); then
//     Config.Workers workers of Config.WorkerClients clients each (one
//     transfer engine per process), released together, run the get/put
//     load for Config.Duration and send their Hist as JSON: aggregate
//     ops/s and p99. Redis: as many connections from this process.
//
// Config.Pin loads the objects and the loads' get keys hard-pinned, so
// that the later phases keep their pool when the master evicts under the
// upsert load (the summaries show the evictions either way).
package master
