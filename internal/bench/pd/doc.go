// Package pd is the engine behind `mooncake bench pd`: colocated vs
// disaggregated prefill/decode on one machine.
//
// Run assembles the instances with cluster.StartInstance (one colocated
// engine) and cluster.Up (proxy + prefill + decode) twice, one cluster
// streaming the KV layer by layer (the default) and one transferring whole
// requests (cluster.InstanceConfig.PDWholeRequest), all in this process on
// loopback, and for each prompt size sends Config.Requests greedy streaming
// requests (Request) to each of the three, interleaved, keeping the medians
// (Median): time to first token, time per output token, KV bytes moved per
// request and the prefill's KV write time, request count and, streamed,
// the writes after the prefill ended (kv_write_tail_ms), read from the
// response's kv_transfer_params. SizeResult.Hidden is the share of the
// transfer that layer-wise streaming hid behind the prefill.
//
// Config.LinkRate (`--link-rate`, ParseRate) puts the clusters' KV transfer
// on the TCP transport behind the transfer engine's token bucket
// (transfer.Config.LinkRate): a link of that bandwidth, on which the
// transfer can take as long as the prefill.
//
// RunPairs (`--tp-pairs`) measures only the KV transfer, for many
// tensor-parallel pairs at once: one cluster per pair and mode (layer-wise,
// whole-request), all started first, then rounds that each time one
// transfer of the engine's 1 MiB writes (over 64 MiB) and send one request
// to every cluster in turn, so that a shared machine's load weighs on every
// pair and on the engine alike; medians over the rounds after the warm-up.
// PairsResult.SameTP is the equal-TP reference of a pair; PairsResult
// carries the model's KV geometry and each PairResult its KV bytes per
// transfer, so the report says how big a transfer is (the CLI runs the
// built-in wide-kv by default there: a real model's KV per layer).
//
// Two limits are measured in the same run: the transfer engine's own
// throughput (EngineGBps: two engines of this process, managed memory,
// auto transport, at least 64 MiB) once with large writes and once per size
// with the disaggregated write's own request size and count, and
// single-thread memcpy (limits.Memcpy). The CLI prints the write's GB/s as
// ratios to both engine figures and the write time as a share of the
// colocated prefill time.
package pd
