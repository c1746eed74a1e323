package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcache-go/mooncake/internal/objheader"

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

// remountWindow is how many chunk calls a node keeps in flight at most
// (fewer when the master's first answer grants fewer): the next chunks are
// encoded, sent and decoded while the master decides one, which it does in
// chunk order.
const remountWindow = 4

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
// one restore session: the first call opens it (announcing how many
// reports follow), the others go up to the master's window at a time.
// Each call has an RPCTimeout for itself and one for each call in flight
// ahead of it (the master decides them first); tombstones in the answers are zeroed
// as they come. A failed call ends the remount: the calls still in flight
// are cancelled and waited for.
func (c *Client) remount(ctx context.Context, segs []*pb.Segment, held []*pb.HeldObject) (remountStats, error) {
	var st remountStats
	n, _ := remountChunk(held)
	first := &pb.RemountSegmentsRequest{ClientId: c.cfg.ClientID, Segments: segs, Objects: held[:n], More: n < len(held),
		Total: uint64(len(held))}
	resp, err := c.remountCall(ctx, first, &st)
	if err != nil || !first.More {
		return st, err
	}
	if resp.RestoreId == 0 {
		return st, fmt.Errorf("store: remount: %w", errNoSessions)
	}
	window := max(1, min(int(resp.Window), remountWindow))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type reply struct {
		req  *pb.RemountSegmentsRequest
		resp *pb.RemountSegmentsResponse
		err  error
	}
	replies := make(chan reply, window)
	inflight := 0
	rest := held[n:]
	for chunk := uint32(1); ; {
		for inflight < window && len(rest) > 0 {
			n, _ := remountChunk(rest)
			req := &pb.RemountSegmentsRequest{ClientId: c.cfg.ClientID, Objects: rest[:n], RestoreId: resp.RestoreId, Chunk: chunk, More: n < len(rest)}
			rest, chunk = rest[n:], chunk+1
			size := req.SizeVT()
			st.calls++
			st.maxBytes, st.bytes = max(st.maxBytes, size), st.bytes+size
			// The master decides the calls in flight before this one
			// first: each of them, and this one, within an RPCTimeout.
			timeout := c.cfg.RPCTimeout * time.Duration(inflight+1)
			inflight++
			go func() {
				rctx, rcancel := context.WithTimeout(ctx, timeout)
				defer rcancel()
				resp, err := c.rpc.RemountSegments(rctx, req)
				replies <- reply{req, resp, err}
			}()
		}
		if inflight == 0 {
			return st, nil
		}
		r := <-replies
		inflight--
		if err := c.remountAnswer(r.req, r.resp, r.err, &st); err != nil {
			cancel()
			for ; inflight > 0; inflight-- {
				<-replies
			}
			return st, err
		}
	}
}

// remountCall sends one call of a remount and takes its answer.
func (c *Client) remountCall(ctx context.Context, req *pb.RemountSegmentsRequest, st *remountStats) (*pb.RemountSegmentsResponse, error) {
	size := req.SizeVT()
	st.calls++
	st.maxBytes, st.bytes = max(st.maxBytes, size), st.bytes+size
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.rpc.RemountSegments(rctx, req)
	cancel()
	return resp, c.remountAnswer(req, resp, err, st)
}

// remountAnswer checks the answer to req, zeroes the tombstones it names
// and counts what it did.
func (c *Client) remountAnswer(req *pb.RemountSegmentsRequest, resp *pb.RemountSegmentsResponse, err error, st *remountStats) error {
	if err != nil {
		return fmt.Errorf("store: remount: call %d of %d objects: %w", req.Chunk, len(req.Objects), rpcErr("store", err))
	}
	if err := statusErr(resp.Status); err != nil {
		return fmt.Errorf("store: remount: call %d: %w", req.Chunk, err)
	}
	c.zeroOwn(resp.Tombstones)
	st.restored += resp.Restored
	st.dropped += resp.Dropped
	return nil
}

// scanPiece is the least bytes of segment data one goroutine of scanHeld
// scans: below it a scan is not split.
const scanPiece = 16 << 20

// scanHeld scans ranges of mem for valid headers (objheader.ScanRanges) as
// reports of segment name, in offset order. The data is cut in pieces of
// at least minPiece bytes scanned by up to GOMAXPROCS goroutines (a header belongs to the piece
// its offset lies in; its value is read wherever it lies), and the
// reports of a piece are allocated together.
func scanHeld(mem []byte, ranges [][2]int, name string, minPiece int) []*pb.HeldObject {
	var total int
	for _, r := range ranges {
		total += max(0, min(r[1], len(mem))-max(r[0], 0))
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, total/minPiece))
	pieces := cutRanges(ranges, len(mem), max(minPiece, (total/(4*workers)+objheader.Align-1)&^(objheader.Align-1)))
	found := make([][]*pb.HeldObject, len(pieces))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(pieces); i = int(next.Add(1)) - 1 {
				fs := objheader.ScanRanges(mem, pieces[i])
				objs := make([]pb.HeldObject, len(fs))
				out := make([]*pb.HeldObject, len(fs))
				for j, f := range fs {
					h := &objs[j]
					h.Segment, h.Offset, h.Key, h.Size, h.Crc32C, h.Seq = name, f.Offset, f.Key, f.Size, f.CRC, f.Seq
					h.HardPin, h.SoftPin, h.SoftPinTtlMs = f.HardPin, f.SoftPin, f.SoftPinTTL.Milliseconds()
					out[j] = h
				}
				found[i] = out
			}
		})
	}
	wg.Wait()
	var n int
	for _, f := range found {
		n += len(f)
	}
	out := make([]*pb.HeldObject, 0, n)
	for _, f := range found {
		out = append(out, f...)
	}
	return out
}

// cutRanges cuts ranges (in order, within [0, size)) into pieces of about
// piece bytes each, at multiples of objheader.Align, in order.
func cutRanges(ranges [][2]int, size, piece int) [][][2]int {
	var out [][][2]int
	var cur [][2]int
	have := 0
	for _, r := range ranges {
		lo, hi := max(r[0], 0), min(r[1], size)
		for lo < hi {
			end := hi
			if lo+piece-have < hi {
				end = (lo + piece - have + objheader.Align - 1) &^ (objheader.Align - 1)
				end = min(end, hi)
			}
			cur = append(cur, [2]int{lo, end})
			have += end - lo
			lo = end
			if have >= piece {
				out = append(out, cur)
				cur, have = nil, 0
			}
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
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
	scanned := time.Since(start)
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
		"max_message_bytes", st.maxBytes, "scan", scanned.Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
}
