// Package soak is `mooncake bench soak`: a mixed P/D and store load on a
// internal/testbed bed of real processes (internal/chaos's Cluster: a
// master and 3 storage nodes, 2 prefill and 2 decode engines of the tiny
// model, a proxy; each role on its own network namespace, talking TCP) for
// a duration, reported per interval: requests, errors by kind, p50/p99
// TTFT and TPOT of the streamed completions, p50/p99 latency of store puts
// and gets, and the resident memory (VmRSS) of every process. No fault is
// injected: a soak shows that nothing degrades or grows with time.
//
// Every completion is checked against the tokens a colocated engine
// produces for the same prompt (a wrong answer is an error of kind
// "wrong"), every store read against the last acknowledged put (kinds
// "stale", "not_found"); see internal/chaos for the kinds.
//
// Run needs what internal/testbed needs (root, ip, nft, tc, unshare) and
// the mooncake binary (Config.Binary, the running executable from the CLI).
package soak
