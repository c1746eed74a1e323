// Package pd is the engine behind `mooncake bench pd`: colocated vs
// disaggregated prefill/decode on one machine.
//
// Run assembles the instances with cluster.StartInstance (one colocated
// engine) and cluster.Up (proxy + prefill + decode), all in this process on
// loopback, and for each prompt size sends Config.Requests greedy streaming
// requests (Request) to each, keeping the medians (Median): time to first
// token, time per output token, KV bytes moved per request and the
// prefill's KV write time and request count, read from the response's
// kv_transfer_params.
//
// Two limits are measured in the same run: the transfer engine's own
// throughput (EngineGBps: two engines of this process, managed memory,
// auto transport, at least 64 MiB) once with large writes and once per size
// with the disaggregated write's own request size and count, and
// single-thread memcpy (limits.Memcpy). The CLI prints the write's GB/s as
// ratios to both engine figures and the write time as a share of the
// colocated prefill time.
package pd
