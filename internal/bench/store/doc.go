// Package store is the engine behind `mooncake bench store`: the store's
// put/get figures next to Redis on loopback.
//
// Run starts a master and Config.Nodes storage nodes in this process
// (loopback, real transfer engines) and one store client (own transfer
// engine, own gRPC connection) per concurrent client. Per value size and
// client count it runs, for Config.Rounds rounds alternating the systems
// (the median round by GB/s is reported), phases of Config.Duration each:
// put (upsert of a key set taking a quarter of the pool), batch-put
// (BatchKeys keys per call), get, batch-get and, store only, get-into (into
// registered memory); batch phases are skipped above 1 MiB. With Config.Device
// "cuda" (`--device cuda`) the store also runs put-device and get-into-device:
// the same puts and gets from and into a GPU buffer of each client
// (store.PutFromDevice, GetIntoDevice), next to the host rows. Result.Rows
// holds ops/s (keys), GB/s and p50/p99 per call.
//
// Before the first round every client puts a few unmeasured values (its
// first transfer to each node fetches the node's descriptor and maps its
// shared memory, a one-off stall of up to ~0.5 s that used to land in the
// first round's put phase).
//
// Where the servers run (Config.Servers): ServersInProcess (the default,
// rows of system SystemInProcess, "mooncake") puts the master, the nodes and
// the clients in one Go process, so they share one scheduler and netpoller;
// ServersProcess (rows SystemProcess, "mooncake-proc") starts the master
// and the nodes as their own processes of Config.Binary (`mooncake master`,
// `mooncake store`, each waited for by its first stdout line, stopped with
// SIGTERM), as redis-server is its own process, with the clients still in
// this process as redis-benchmark's are in its own; ServersBoth measures
// both in the same run, alternated round by round with Redis. With
// Config.ClientProcs the separate-process cluster's clients are processes
// too (`mooncake bench store --client-worker`, RunWorker, one client each,
// driven by JSON lines on stdin and answering on stdout; rows
// SystemClientProcs), as one engine worker per process is deployed, and
// Redis is measured both as usual and by as many redis-benchmark processes
// of one connection each (rows SystemRedisProcs). Rows of process clusters
// carry the servers' CPU time (Row.ServerCPU, from /proc/PID/stat), and
// client-process and Redis rows their clients', so CPU per key compares
// the systems whole.
//
// Redis is measured by Debian's redis-benchmark (package redis-tools)
// against redis-server started on a free loopback port (readiness is its
// "Ready to accept connections" log line) or a running Redis
// (Config.Redis HOST:PORT): -t set (put) or get, -d size, -c clients,
// -r the same number of keys as the store's key set, -P 1 or BatchKeys
// (batch-*: pipelined), and -n sized to last about Config.Duration (from a
// short calibration run in the first round, from the previous round after).
// Its --csv output gives rps, p50 and p99 (per request; with a pipeline, the
// time to the first reply of its batch). Before a get phase unmeasured
// pipelined SETs make sure each key was written with probability > 99%.
// Without redis-benchmark (ErrRedisBenchmarkMissing) or redis-server the
// run goes on without Redis and Result.RedisSkipped says why.
//
// Config.Grants GrantsBoth runs a second in-process cluster whose master
// signs data-path grants and whose nodes check them, in every round next
// to the first; Result.Grants holds each phase's paired ratios (Ratios:
// each round's on over off, the median steadier than the ratio of the two
// sides' median rounds). RunSecurity (security.go) measures tenants,
// grants and TLS on vs off the same way, pools side by side, many short
// rounds.
//
// Single-thread memcpy (limits.Memcpy) is measured as the machine's limit.
// Last, Run fills a fresh 2 x 64 MiB pool with random 4 KiB-1 MiB values
// until the first eviction, at high watermarks 0.90 and 1.0, and reports the
// utilisation reached (Result.Utilisation).
package store
