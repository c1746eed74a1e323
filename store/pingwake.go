package store

import (
	"google.golang.org/grpc/connectivity"
)

// A node pings at once when its connection to the master comes back after
// it was lost, instead of at its next tick: a restarted master, or a new
// HA leader, answers that ping with NEED_REMOUNT, so the node's remount (and
// every object it holds) starts up to a PingInterval sooner. A lost
// connection is also redialled at once (gRPC leaves it idle until the next
// call otherwise), with the dial backoff of dialMaster.

// watchMaster follows the state of the connection to the master until the
// client stops, and wakes the ping loop (a non-blocking send on wake) each
// time the connection is ready again after it was lost.
func (c *Client) watchMaster(wake chan<- struct{}) {
	defer c.wg.Done()
	lost := false
	for st := c.conn.GetState(); ; {
		switch st {
		case connectivity.Ready:
			if lost {
				lost = false
				select {
				case wake <- struct{}{}:
				default: // a wake-up is pending already
				}
			}
		case connectivity.Idle:
			lost = true
			c.conn.Connect()
		case connectivity.TransientFailure, connectivity.Connecting:
			lost = true
		}
		if !c.conn.WaitForStateChange(c.stopCtx, st) {
			return
		}
		st = c.conn.GetState()
	}
}
