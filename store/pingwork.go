package store

import (
	"time"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// Liveness never waits for data-path or disk work. The ping loop only
// sends pings; the work a ping's answer brings (zeroing tombstoned headers,
// offloading evicted objects to the disk tier, deleting disk copies,
// remounting) runs on the ping worker, one answer at a time. While the
// worker is still busy with an earlier answer, the pings go on and their
// answers' tombstones and remount requests are left for a later answer
// (the master repeats them on every ping until they are reported done);
// the disk copies to delete, which the master names once, are kept for
// the worker's next job. So a disk write that stalls longer than the
// client TTL costs that work time, never the node's membership.

// pingJob is the work of one ping answer.
type pingJob struct {
	tombs       []*pb.HeaderRef
	scrub       []*pb.Extent
	diskRemove  []*pb.HeldObject
	needRemount bool
	done        chan struct{} // closed when the worker finished it
}

// pingWorker runs the ping answers' work until the client stops.
func (c *Client) pingWorker(jobs <-chan pingJob) {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case j := <-jobs:
			c.zeroOwn(j.tombs)
			c.scrubOwn(j.scrub)
			if c.cfg.Disk != nil {
				c.mu.Lock()
				rm := append(c.diskRemoveLater, j.diskRemove...)
				c.diskRemoveLater = nil
				c.mu.Unlock()
				for _, h := range rm {
					c.cfg.Disk.Delete(h.Key, h.Seq)
				}
			}
			// Each remount call has its own RPCTimeout: a large segment's
			// restore outlasts one ping's deadline. Close still interrupts it.
			c.remountOnPing(c.stopCtx, j.needRemount)
			close(j.done)
		}
	}
}

// handOff gives an answer's work to the worker and returns its done
// channel, or nil when the worker is busy with an earlier answer.
func (c *Client) handOff(resp *pb.PingResponse) chan struct{} {
	// An answer's extents to scrub are taken only when none taken before
	// are still being zeroed or waiting to be reported (scrub.go).
	scrub := resp.Scrub
	if len(scrub) > 0 {
		c.mu.Lock()
		if c.scrubBusy || len(c.scrubbed) > 0 {
			scrub = nil
		} else {
			c.scrubBusy = true
		}
		c.mu.Unlock()
	}
	j := pingJob{tombs: resp.Tombstones, scrub: scrub, diskRemove: resp.DiskRemove, needRemount: resp.NeedRemount, done: make(chan struct{})}
	select {
	case c.pingJobs <- j:
		return j.done
	default:
		if len(scrub) > 0 {
			c.mu.Lock()
			c.scrubBusy = false
			c.mu.Unlock()
		}
		if len(resp.DiskRemove) > 0 && c.cfg.Disk != nil {
			c.mu.Lock()
			c.diskRemoveLater = append(c.diskRemoveLater, resp.DiskRemove...)
			c.mu.Unlock()
		}
		return nil
	}
}

// drained waits, at most wait, for a full batch of tombstones to be
// zeroed, so that the next ping reports them and fetches the next batch.
func drained(done chan struct{}, wait time.Duration) bool {
	if done == nil {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
