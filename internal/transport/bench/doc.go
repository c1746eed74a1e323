// Package bench is the transfer engine benchmark behind `mooncake bench
// transfer`, after Mooncake's transfer_engine_bench: a target engine that
// registers a buffer and serves, and an initiator that runs --threads
// goroutines, each submitting batches of --batch-size READ or WRITE requests
// of --block-size bytes and waiting for them, for --duration.
//
// The same run also measures the machine's limit for the transport, so the
// figure is reported as a ratio: raw Go loopback TCP (one connection, the
// same block size, a second process when the target is one) for tcp, and
// single-thread memcpy of the same block size for shm and inproc.
//
// Result is what the JSON line holds. Latencies are per batch (submit to
// Wait returning).
package bench
