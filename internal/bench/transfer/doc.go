// Package transfer is the transfer engine benchmark behind `mooncake bench
// transfer`, after Mooncake's transfer_engine_bench: a target engine that
// registers a buffer and serves, and an initiator that runs --threads
// goroutines, each submitting batches of --batch-size READ or WRITE requests
// of --block-size bytes and waiting for them, for --duration. With
// --scatter-gather (Config.ScatterGather) each batch is one scatter-gather
// request of --batch-size extents instead.
//
// The target runs in this process (StartTarget) or in a child process
// (SpawnTarget re-executes a binary whose target mode prints Target.Line on
// stdout and serves until its stdin closes); ParseLine and Discover find a
// target's buffer from that line or through the engine handshake.
//
// The same run also measures the machine's limit for the transport through
// package limits, so the figure is reported as a ratio: raw Go loopback TCP
// (one connection, the same block size, to a sink in the target's process)
// for tcp, and single-thread memcpy of the same block size over the same
// working set for shm and inproc, measured before and after the run and
// averaged.
//
// Result is what the JSON line holds. Latencies are per batch (submit to
// Wait returning). SmallDuringLarge measures the latency of small
// synchronous transfers while a LargeSize stream runs (LoadResult).
//
// This package shares its name with the engine it measures (the top-level
// transfer package, which it imports); importers that need both alias it.
package transfer
