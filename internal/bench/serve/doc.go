// Package serve is the engine behind `mooncake bench serve`: it runs the
// reference engine in process (no HTTP), stepping it directly, and returns
// a Result: prompt tokens/s and the time to first token of a prompt cold and
// again with a full prefix-cache hit, the decode step time and output
// tokens/s at each batch size, and the KV bytes per token.
//
// Limits measured in the same run: the matmul kernel's GFLOP/s on all cores
// (model.KernelFLOPS, best of one measurement before and one after) and
// single-thread memcpy GB/s (limits.Memcpy); prefill is reported as a ratio
// to the kernel rate, decode's weight reads to memcpy.
package serve
