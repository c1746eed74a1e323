// Package limits measures this machine's limits, the denominators of every
// `mooncake bench` ratio, in one place:
//
//   - Memcpy: single-thread copy bandwidth (GB/s) of block-size chunks over a
//     working set of span bytes, after one untimed warm-up pass (so that page
//     faults of fresh buffers are not counted), averaged over a duration;
//   - RawTCP: one Go loopback TCP connection writing block-size buffers to a
//     Sink (a reader that discards what it receives), GB/s.
//
// ListenSink binds a loopback port and serves until Close; a target process
// of the transfer benchmark runs one so that the initiator's baseline crosses
// the same process boundary as the measured transfers.
package limits
