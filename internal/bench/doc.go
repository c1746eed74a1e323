// Package bench holds the benchmark engines behind `mooncake bench`: each
// subpackage runs one measurement and returns a result struct, and the CLI
// (internal/cli) only parses flags and prints. Every figure is reported next
// to a limit of this machine measured in the same run, by the one probe
// package, limits:
//
//   - limits: single-thread memcpy GB/s and raw loopback TCP GB/s (the
//     machine's limits every engine divides by);
//   - transfer: the transfer engine benchmark (target + initiator, also as a
//     child process), `mooncake bench transfer`;
//   - store: the store's put/get figures next to Redis (measured by Debian's
//     redis-benchmark), `mooncake bench store`;
//   - pd: colocated vs disaggregated TTFT/TPOT and the KV transfer cost,
//     `mooncake bench pd`;
//   - serve: the reference engine's prefill and decode figures,
//     `mooncake bench serve`;
//   - trace: trace-driven cache policy and routing simulation,
//     `mooncake bench trace`;
//   - soak: a mixed P/D + store load on the multi-host test bed
//     (internal/testbed, internal/chaos), `mooncake bench soak`.
//
// The packages sit above everything they measure and nothing imports them
// but internal/cli.
package bench
