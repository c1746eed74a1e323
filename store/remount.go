package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// Remount chunking. A node re-reports everything its segment holds when a
// master that does not know it asks (a restart or an HA failover); one
// report is about 60 bytes, so a whole segment in one message would pass
// gRPC's 4 MiB default limit near 70,000 objects and be refused on every
// ping. The reports travel instead in a restore session of chunks, each at
// most remountChunkObjects reports and remountChunkBytes of encoded
// reports: a quarter of the limit leaves room for long keys (one report is
// at most a few KiB) and for the message's other fields, and the master
// decides one chunk in a few milliseconds under its lock.
const (
	remountChunkObjects = 16384
	remountChunkBytes   = 1 << 20
)

// Backoff between failed remounts: a refused remount is retried, but not
// at every ping.
const (
	remountBackoffMin = 100 * time.Millisecond
	remountBackoffMax = 30 * time.Second
)

// errNoSessions: the master answered a chunked remount's first call
// without a restore session (it reads the whole remount from one message).
var errNoSessions = errors.New("master does not take a remount in chunks")

// remountStats is what one remount did.
type remountStats struct {
	calls    int   // RemountSegments calls
	maxBytes int   // largest request, encoded
	bytes    int   // all requests, encoded
	restored int64 // objects the master took over
	dropped  int64 // reports it refused
}

// remountChunk is how many of held the next chunk carries and their
// encoded size: at least one report, and within both bounds otherwise.
func remountChunk(held []*pb.HeldObject) (n, size int) {
	for n < len(held) && n < remountChunkObjects {
		s := held[n].SizeVT()
		s += 1 + sizeVarint(uint64(s)) // field tag and length
		if n > 0 && size+s > remountChunkBytes {
			break
		}
		size += s
		n++
	}
	return n, size
}

func sizeVarint(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// remount mounts segs again on the master and re-reports held (the
// segment's objects in offset order, then disk copies) in chunks through
// one restore session. Each call has its own RPCTimeout; tombstones in the
// answers are zeroed as they come.
func (c *Client) remount(ctx context.Context, segs []*pb.Segment, held []*pb.HeldObject) (remountStats, error) {
	var st remountStats
	req := &pb.RemountSegmentsRequest{ClientId: c.cfg.ClientID, Segments: segs}
	for rest := held; ; {
		n, _ := remountChunk(rest)
		req.Objects, rest = rest[:n], rest[n:]
		req.More = len(rest) > 0
		st.calls++
		size := req.SizeVT()
		st.maxBytes, st.bytes = max(st.maxBytes, size), st.bytes+size
		rctx, cancel := c.rpcCtx(ctx)
		resp, err := c.rpc.RemountSegments(rctx, req)
		cancel()
		if err != nil {
			return st, fmt.Errorf("store: remount: call %d of %d objects: %w", req.Chunk, len(req.Objects), rpcErr("store", err))
		}
		if err := statusErr(resp.Status); err != nil {
			return st, fmt.Errorf("store: remount: call %d: %w", req.Chunk, err)
		}
		c.zeroOwn(resp.Tombstones)
		st.restored += resp.Restored
		st.dropped += resp.Dropped
		if !req.More {
			return st, nil
		}
		if req.RestoreId == 0 {
			if resp.RestoreId == 0 {
				return st, fmt.Errorf("store: remount: %w", errNoSessions)
			}
			req.RestoreId, req.Segments = resp.RestoreId, nil
		}
		req.Chunk++
	}
}

// remountState is where the ping loop stands with remounting (guarded by
// Client.mu).
type remountState struct {
	pending bool          // a remount failed: redo it even without NEED_REMOUNT
	retryAt time.Time     // no new try before this
	backoff time.Duration // wait after the next failure
	last    remountStats  // the last remount that succeeded
}

// remountOnPing remounts after a ping answer asked for it (needRemount) or
// after an earlier remount failed, once its backoff has passed. A failure
// is logged at warning level (the node's objects are not known to the
// master until a remount succeeds) and retried with exponential backoff.
func (c *Client) remountOnPing(ctx context.Context, needRemount bool) {
	now := time.Now()
	c.mu.Lock()
	rs := &c.remountSt
	due := (needRemount || rs.pending) && !now.Before(rs.retryAt)
	c.mu.Unlock()
	if !due {
		return
	}
	var segs []*pb.Segment
	if c.segmentSpec != nil {
		segs = append(segs, c.segmentSpec)
	}
	start := time.Now()
	held := c.held() // a new or restarted master learns what our memory holds
	st, err := c.remount(ctx, segs, held)
	c.mu.Lock()
	if err != nil {
		rs.pending = true
		rs.backoff = min(max(2*rs.backoff, remountBackoffMin, c.cfg.PingInterval), remountBackoffMax)
		rs.retryAt = time.Now().Add(rs.backoff)
		backoff := rs.backoff
		c.mu.Unlock()
		c.log.Warn("store: remount failed: the master does not know this node's objects yet", "client", c.cfg.ClientID,
			"held", len(held), "calls", st.calls, "retry_in", backoff, "err", err)
		return
	}
	*rs = remountState{last: st}
	c.remounts++
	c.restored += int(st.restored)
	c.mu.Unlock()
	c.log.Info("store: remounted after NEED_REMOUNT", "client", c.cfg.ClientID, "segments", len(segs),
		"held", len(held), "restored", st.restored, "dropped", st.dropped, "calls", st.calls,
		"max_message_bytes", st.maxBytes, "took", time.Since(start).Round(time.Millisecond))
}
