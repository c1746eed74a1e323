package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

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

// remountCodec encodes a remount's calls with their generated fast codec
// (the same protobuf bytes; storepb.GRPCCodec).
var remountCodec = grpc.ForceCodecV2(pb.GRPCCodec())

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
	reports  int   // reports sent
	maxBytes int   // largest request, encoded
	bytes    int   // all requests, encoded
	restored int64 // objects the master took over
	dropped  int64 // reports it refused
}

// heldSource gives a remount its reports in order: a slice of them, or a
// scan of the segment in progress (scanSource).
type heldSource interface {
	// peek is the next report, once it is known (nil: there is none).
	peek() *pb.HeldObject
	// peekReady is peek when the next report is known already (ready);
	// it does not wait for a scan in progress.
	peekReady() (h *pb.HeldObject, ready bool)
	// advance moves past the report peek returned.
	advance()
	// expect is how many reports the source gives in all: exact for a
	// slice and for a finished scan, extrapolated from the finished
	// pieces while a scan runs.
	expect() uint64
}

// sliceSource is a heldSource over reports already found.
type sliceSource struct{ held []*pb.HeldObject }

func (s *sliceSource) peek() *pb.HeldObject {
	if len(s.held) == 0 {
		return nil
	}
	return s.held[0]
}
func (s *sliceSource) peekReady() (*pb.HeldObject, bool) { return s.peek(), true }
func (s *sliceSource) advance()                          { s.held = s.held[1:] }
func (s *sliceSource) expect() uint64                    { return uint64(len(s.held)) }

// remountChunk takes the next chunk's reports from src: at least one
// (none when src is empty), and within both bounds otherwise. more says
// whether src has reports after them. With ready, past the first report
// it takes only those src knows already (a remount's first call goes out
// without waiting for a scan's later pieces): more is then true whenever
// src cannot tell yet.
func remountChunk(src heldSource, ready bool) (chunk []*pb.HeldObject, more bool) {
	chunk, more, _ = remountChunkSized(src, ready, nil)
	return chunk, more
}

// remountChunkSized is remountChunk into buf (emptied; nil: a new slice)
// that also returns the reports' encoded size in a request (their field
// tags and lengths included).
func remountChunkSized(src heldSource, ready bool, buf []*pb.HeldObject) (chunk []*pb.HeldObject, more bool, size int) {
	chunk = buf[:0]
	for len(chunk) < remountChunkObjects {
		var h *pb.HeldObject
		if ready && len(chunk) > 0 {
			var known bool
			if h, known = src.peekReady(); !known {
				return chunk, true, size
			}
		} else {
			h = src.peek()
		}
		if h == nil {
			return chunk, false, size
		}
		s := h.SizeVT()
		s += 1 + sizeVarint(uint64(s)) // field tag and length
		if len(chunk) > 0 && size+s > remountChunkBytes {
			break
		}
		size += s
		chunk = append(chunk, h)
		src.advance()
	}
	if ready {
		h, known := src.peekReady()
		return chunk, !known || h != nil, size
	}
	return chunk, src.peek() != nil, size
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
//
// remount is the first mount of a client joining (the segment's memory is
// new: Fresh, nothing for a scrubbing master to zero), remountFrom a
// remount of memory a master knew before.
func (c *Client) remount(ctx context.Context, segs []*pb.Segment, held []*pb.HeldObject) (remountStats, error) {
	return c.remountFromFresh(ctx, segs, &sliceSource{held}, true)
}

// remountFrom is remount of the reports src gives: each chunk is sent
// once its reports are found, so a scan in progress and the calls overlap.
// The first call announces src.expect() (the master sizes its object
// table by it).
func (c *Client) remountFrom(ctx context.Context, segs []*pb.Segment, src heldSource) (remountStats, error) {
	return c.remountFromFresh(ctx, segs, src, false)
}

func (c *Client) remountFromFresh(ctx context.Context, segs []*pb.Segment, src heldSource, fresh bool) (remountStats, error) {
	var st remountStats
	objs, more := remountChunk(src, true)
	first := &pb.RemountSegmentsRequest{ClientId: c.cfg.ClientID, Segments: segs, Objects: objs, More: more,
		Total: uint64(len(objs)) + src.expect(), Fresh: fresh}
	for _, sg := range segs {
		p, err := c.mountProof(sg)
		if err != nil {
			return st, err
		}
		first.Proofs = append(first.Proofs, p)
	}
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
	var free [][]*pb.HeldObject // the answered calls' report slices, for the next chunks
	for chunk := uint32(1); ; {
		for inflight < window && more {
			var buf []*pb.HeldObject
			if n := len(free); n > 0 {
				buf, free = free[n-1], free[:n-1]
			}
			objs, m, objBytes := remountChunkSized(src, false, buf)
			more = m
			req := &pb.RemountSegmentsRequest{ClientId: c.cfg.ClientID, RestoreId: resp.RestoreId, Chunk: chunk, More: more}
			size := req.SizeVT() + objBytes // the reports' size summed as they were taken, not a second pass over them
			req.Objects = objs
			chunk++
			st.calls++
			st.reports += len(req.Objects)
			st.maxBytes, st.bytes = max(st.maxBytes, size), st.bytes+size
			// The master decides the calls in flight before this one
			// first: each of them, and this one, within an RPCTimeout.
			timeout := c.cfg.RPCTimeout * time.Duration(inflight+1)
			inflight++
			go func() {
				rctx, rcancel := context.WithTimeout(ctx, timeout)
				defer rcancel()
				resp, err := c.rpc.RemountSegments(rctx, req, remountCodec)
				replies <- reply{req, resp, err}
			}()
		}
		if inflight == 0 {
			return st, nil
		}
		r := <-replies
		inflight--
		err := c.remountAnswer(r.req, r.resp, r.err, &st)
		if r.err == nil { // the call is done with its reports
			clear(r.req.Objects) // the reports it held are garbage now
			free = append(free, r.req.Objects[:0])
		}
		if err != nil {
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
	st.reports += len(req.Objects)
	st.maxBytes, st.bytes = max(st.maxBytes, size), st.bytes+size
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.rpc.RemountSegments(rctx, req, remountCodec)
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

// scanFirstPiece bounds the first piece of a scan: the remount's first
// call (which mounts the segments and sizes the master's tables for the
// reports to come) goes out once it is scanned, while the other pieces
// are scanned.
const scanFirstPiece = 1 << 20

// A remount's scan runs at most scanAhead pieces of remountPiece bytes
// per goroutine ahead of the report the remount takes next: the reports
// found wait in memory for their calls no longer than that, so a node
// holds about the calls in flight and the pieces ahead, not its whole
// segment's reports (one report and its key take about 120 bytes). Freed
// reports are collected and their memory allocated again for later pieces
// rather than fresh pages taken from the system.
const (
	remountPiece = 4 << 20
	scanAhead    = 2
)

// scanHeld scans ranges of mem for valid headers (objheader.ScanRanges) as
// reports of segment name, in offset order: scanSource's reports, all of
// them.
func scanHeld(mem []byte, ranges [][2]int, name string, minPiece int) []*pb.HeldObject {
	src := startScan(mem, ranges, name, minPiece, 0, nil)
	defer src.close()
	var out []*pb.HeldObject
	for h := src.peek(); h != nil; h = src.peek() {
		out = append(out, h)
		src.advance()
	}
	return out
}

// scanSource is a scan of a segment in progress, as a heldSource. The
// data is cut in pieces of at least minPiece bytes scanned by up to
// GOMAXPROCS goroutines, which take the pieces in offset order (a header
// belongs to the piece its offset lies in; its value is read wherever it
// lies, and its CRC checked before it is reported); the reports of a
// piece are allocated together, and given once the pieces before them are
// given. The reports of tail follow the scan's. With ahead > 0 a piece is
// begun only once the pieces before it but ahead-1 at most are given.
type scanSource struct {
	found  [][]*pb.HeldObject
	done   []chan struct{} // closed when found[i] is set
	sizes  []int           // data bytes of each piece
	counts []int           // reports found in each piece (set before done[i] closes)
	total  int             // of all of them
	i, j   int             // the next report: found[i][j] (tail[j] past the pieces)
	tail   []*pb.HeldObject
	stop   atomic.Bool // close: the pieces not begun are skipped
	wg     sync.WaitGroup
	fin    chan struct{} // closed when every piece is done and took is set
	took   time.Duration // the scan's time

	ahead int        // pieces scanned ahead of piece i at most (0: no bound)
	mu    sync.Mutex // guards given
	given int        // pieces given (i, published for the scanners)
	moved *sync.Cond // signalled when given moves or the scan stops
}

// startScan starts scanning ranges of mem (see scanSource), with ahead
// pieces at most per goroutine scanned ahead of the reports given (0: no
// bound, and pieces of at least minPiece bytes, larger for a large
// segment; with a bound, pieces of minPiece bytes); the caller closes it.
func startScan(mem []byte, ranges [][2]int, name string, minPiece, ahead int, tail []*pb.HeldObject) *scanSource {
	start := time.Now()
	var total int
	for _, r := range ranges {
		total += max(0, min(r[1], len(mem))-max(r[0], 0))
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, total/minPiece))
	piece := max(minPiece, (total/(4*workers)+objheader.Align-1)&^(objheader.Align-1))
	if ahead > 0 {
		piece = max(objheader.Align, minPiece&^(objheader.Align-1))
	}
	pieces := cutRanges(ranges, len(mem), min(piece, scanFirstPiece), piece)
	s := &scanSource{found: make([][]*pb.HeldObject, len(pieces)), done: make([]chan struct{}, len(pieces)),
		sizes: make([]int, len(pieces)), counts: make([]int, len(pieces)), total: total, tail: tail, fin: make(chan struct{}),
		ahead: ahead * workers}
	s.moved = sync.NewCond(&s.mu)
	for i, p := range pieces {
		s.done[i] = make(chan struct{})
		for _, r := range p {
			s.sizes[i] += r[1] - r[0]
		}
	}
	var next atomic.Int64
	for range workers {
		s.wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(pieces); i = int(next.Add(1)) - 1 {
				if s.ahead > 0 {
					s.waitTurn(i)
				}
				if !s.stop.Load() {
					s.found[i] = scanOne(mem, pieces[i], name)
					s.counts[i] = len(s.found[i])
				}
				close(s.done[i])
			}
		})
	}
	go func() {
		s.wg.Wait()
		s.took = time.Since(start)
		close(s.fin)
	}()
	return s
}

// waitTurn waits until piece i may be scanned: fewer than ahead pieces
// from the next one given, or the scan stopped.
func (s *scanSource) waitTurn(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i >= s.given+s.ahead && !s.stop.Load() {
		s.moved.Wait()
	}
}

// next moves past piece i, given: its reports are in chunks now, and a
// piece further on may be scanned.
func (s *scanSource) next() {
	s.found[s.i] = nil
	s.i, s.j = s.i+1, 0
	if s.ahead > 0 {
		s.mu.Lock()
		s.given = s.i
		s.mu.Unlock()
		s.moved.Broadcast()
	}
}

// scanOne is the reports of one piece of a scan.
func scanOne(mem []byte, ranges [][2]int, name string) []*pb.HeldObject {
	fs := objheader.ScanRanges(mem, ranges)
	objs := make([]pb.HeldObject, len(fs))
	out := make([]*pb.HeldObject, len(fs))
	for j, f := range fs {
		h := &objs[j]
		h.Segment, h.Offset, h.Key, h.Size, h.Crc32C, h.Seq = name, f.Offset, f.Key, f.Size, f.CRC, f.Seq
		h.HardPin, h.SoftPin, h.SoftPinTtlMs = f.HardPin, f.SoftPin, f.SoftPinTTL.Milliseconds()
		out[j] = h
	}
	return out
}

func (s *scanSource) peek() *pb.HeldObject {
	for s.i < len(s.found) {
		<-s.done[s.i]
		if s.j < len(s.found[s.i]) {
			return s.found[s.i][s.j]
		}
		s.next() // given: the chunks hold what is still needed
	}
	if s.j < len(s.tail) {
		return s.tail[s.j]
	}
	return nil
}

func (s *scanSource) peekReady() (*pb.HeldObject, bool) {
	for s.i < len(s.found) {
		select {
		case <-s.done[s.i]:
		default:
			return nil, false
		}
		if s.j < len(s.found[s.i]) {
			return s.found[s.i][s.j], true
		}
		s.next()
	}
	return s.peek(), true // the tail's, or none
}

func (s *scanSource) advance() { s.j++ }

func (s *scanSource) expect() uint64 {
	if s.i == len(s.found) {
		return uint64(len(s.tail) - s.j)
	}
	// Every piece done counts, those given too: the first call's
	// figure rests on more than the pieces left to give.
	var known, knownBytes, unknownBytes, given int
	for k := range s.found {
		select {
		case <-s.done[k]:
			known += s.counts[k]
			knownBytes += s.sizes[k]
			if k < s.i {
				given += s.counts[k]
			}
		default:
			unknownBytes += s.sizes[k]
		}
	}
	if knownBytes > 0 { // the pieces not done yet hold as many reports per byte
		known += int(uint64(known) * uint64(unknownBytes) / uint64(knownBytes))
	}
	return uint64(max(0, known-given-s.j) + len(s.tail)) // s.j of piece s.i given already
}

// close stops the scan (the pieces not begun are skipped) and waits for
// its goroutines: the segment's memory is not read after close returns.
// It returns the scan's time.
func (s *scanSource) close() time.Duration {
	s.stop.Store(true)
	s.mu.Lock() // a scanner between its check of stop and its wait has waited
	s.mu.Unlock()
	s.moved.Broadcast()
	<-s.fin
	return s.took
}

// cutRanges cuts ranges (in order, within [0, size)) into pieces of about
// piece bytes each, the first of about first bytes, at multiples of
// objheader.Align, in order.
func cutRanges(ranges [][2]int, size, first, piece int) [][][2]int {
	var out [][][2]int
	var cur [][2]int
	have, target := 0, first
	for _, r := range ranges {
		lo, hi := max(r[0], 0), min(r[1], size)
		for lo < hi {
			end := hi
			if lo+target-have < hi {
				end = (lo + target - have + objheader.Align - 1) &^ (objheader.Align - 1)
				end = min(end, hi)
			}
			cur = append(cur, [2]int{lo, end})
			have += end - lo
			lo = end
			if have >= target {
				out = append(out, cur)
				cur, have, target = nil, 0, piece
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
	held := c.held() // a new or restarted master learns what our memory holds, as the scan finds it
	st, err := c.remountFrom(ctx, segs, held)
	scanned := held.close()
	c.mu.Lock()
	if err != nil {
		rs.pending = true
		rs.backoff = min(max(2*rs.backoff, remountBackoffMin, c.cfg.PingInterval), remountBackoffMax)
		rs.retryAt = time.Now().Add(rs.backoff)
		backoff := rs.backoff
		c.mu.Unlock()
		c.log.Warn("store: remount failed: the master does not know this node's objects yet", "client", c.cfg.ClientID,
			"held", st.reports, "calls", st.calls, "retry_in", backoff, "err", err)
		return
	}
	*rs = remountState{last: st}
	c.remounts++
	c.restored += int(st.restored)
	c.mu.Unlock()
	c.log.Info("store: remounted after NEED_REMOUNT", "client", c.cfg.ClientID, "segments", len(segs),
		"held", st.reports, "restored", st.restored, "dropped", st.dropped, "calls", st.calls,
		"max_message_bytes", st.maxBytes, "scan", scanned.Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
}
