package store

import (
	"time"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// Scrubbing (a master with tenants and data-path grants, see
// internal/master's scrub.go): a ping's answer names freed extents of this
// node's segment that the master hands out again only once they are zero.
// The ping worker zeroes them and the next ping reports them; while
// answers bring such work the client pings again scrubRepoll after the
// worker finished, not a ping interval later, so freed space comes back
// within a round trip and the zeroing.
//
// The client takes an answer's extents only when it has none it took
// earlier still being zeroed or not yet reported: the master names an
// extent in every answer until it is reported, and once reported it may
// hold a new object, so an older answer's extents must never be zeroed
// after a report (handOff).

// scrubRepoll is how soon the client pings again after zeroing an answer's
// extents.
const scrubRepoll = 5 * time.Millisecond

// scrubHoles is the extent length from which zeroing managed memory (a
// memfd) skips the pages the kernel holds no data for (they read as zero):
// a remount's whole segment, most of which was never written.
const scrubHoles = 1 << 20

// scrubOwn zeroes the extents of this client's segment and queues them
// for the next ping's report (the worker takes one answer's at a time:
// handOff). Extents of other segments or out of bounds (which a master
// does not send) are ignored and not reported.
func (c *Client) scrubOwn(xs []*pb.Extent) {
	if len(xs) == 0 {
		return
	}
	done := make([]*pb.Extent, 0, len(xs))
	if c.segmentSpec != nil {
		var data [][2]int // the segment's written ranges, read once for large extents
		for _, x := range xs {
			end := x.Offset + x.Length
			if x.Segment != c.segmentSpec.Name || x.Length == 0 || end < x.Offset || end > uint64(len(c.segment)) {
				continue
			}
			lo, hi := int(x.Offset), int(end)
			if hi-lo >= scrubHoles {
				if data == nil {
					data = c.segmentData()
				}
				for _, r := range data {
					if a, b := max(r[0], lo), min(r[1], hi); a < b {
						clear(c.segment[a:b])
					}
				}
			} else {
				clear(c.segment[lo:hi])
			}
			done = append(done, x)
		}
	}
	c.mu.Lock()
	c.scrubbed = append(c.scrubbed, done...)
	c.scrubBusy = false
	c.mu.Unlock()
}

// takeScrubbed returns the extents zeroed since the last ping.
func (c *Client) takeScrubbed() []*pb.Extent {
	c.mu.Lock()
	defer c.mu.Unlock()
	x := c.scrubbed
	c.scrubbed = nil
	return x
}

// requeueScrubbed puts back extents a failed ping did not report.
func (c *Client) requeueScrubbed(x []*pb.Extent) {
	if len(x) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scrubbed = append(x, c.scrubbed...)
}
