package tcp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// Defaults for PeerConfig and ServerConfig.
const (
	DefaultLanes     = 4 // bulk lanes, plus one express lane
	DefaultSliceSize = 256 << 10
	DefaultSmallMax  = 64 << 10
	DefaultMaxSlice  = 16 << 20
)

// PeerConfig shapes the lanes to one peer.
type PeerConfig struct {
	Lanes    int    // bulk lanes (>= 1); one express lane is added
	SmallMax int    // slices up to this size may use the express lane
	Checksum bool   // send/verify CRC32C per slice
	MaxSlice uint64 // largest slice the peer accepts (bounds responses too)
	MaxBatch int    // slices gathered into one writev
	// MaxBatchBytes bounds the payload bytes gathered into one writev (1 MiB).
	MaxBatchBytes int
	// Bulk, when set, is a semaphore shared by all peers of an engine: a
	// bulk lane's writer holds a token while it writes payloads larger than
	// SmallMax, so a P stays free to poll the network for the express lane.
	// Readers never take it (see reader).
	Bulk chan struct{}
	// Limiter, when set, is a token bucket (bytes) shared by all lanes of an
	// engine: a lane waits for a batch's WRITE payload bytes before sending
	// it, so what the engine sends averages at most the bucket's rate (a
	// link of that bandwidth). *rate.Limiter of golang.org/x/time/rate is one.
	Limiter Limiter
}

// Limiter is a token bucket: WaitN blocks until n tokens (n <= Burst()) are
// available or ctx ends.
type Limiter interface {
	WaitN(ctx context.Context, n int) error
	Burst() int
}

func (c *PeerConfig) defaults() {
	if c.Lanes <= 0 {
		c.Lanes = DefaultLanes
	}
	if c.SmallMax <= 0 {
		c.SmallMax = DefaultSmallMax
	}
	if c.MaxSlice == 0 {
		c.MaxSlice = DefaultMaxSlice
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 512
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 1 << 20
	}
}

// Completer is told when a slice ends. It runs on a lane goroutine and must
// not block.
type Completer interface {
	OpDone(op *Op, err error)
}

// Op is one slice: Buf is the local registered memory (source of a WRITE,
// destination of a READ), Remote the peer's address.
type Op struct {
	Write  bool
	Remote uint64
	Buf    []byte
	Done   Completer
	Tag    int // free for the Completer
	Tries  int // free for the Completer (retry bookkeeping)
	// Grant, when set, is an encoded grant (package internal/grant) that
	// covers the slice: the lane sends it (OpGrant) before the slice unless
	// it sent the same grant (the same bytes) among its last grant.SetSize.
	Grant string
	// Ext, when set, makes the op scatter-gather (wire.OpReadV/OpWriteV,
	// for a peer whose lanes offer them: Peer.Vectored): the peer's ranges,
	// in order, and Vec the local bytes, in order, of the same total
	// length (Remote and Buf are unused). The pieces of the two sides need
	// not line up.
	Ext []wire.Extent
	Vec [][]byte

	id   uint64
	n    int // payload bytes
	lane *lane
}

// size is the op's payload bytes.
func (op *Op) size() int {
	if op.Ext == nil {
		return len(op.Buf)
	}
	n := 0
	for _, b := range op.Vec {
		n += len(b)
	}
	return n
}

// Dialer opens lane i to the peer, handshake done, ready for data.
type Dialer func(ctx context.Context, lane int) (net.Conn, error)

// Peer is a set of lanes to one peer engine.
type Peer struct {
	cfg   PeerConfig
	lanes []*lane // [0] express
	dead  atomic.Bool
	rr    atomic.Uint64
	vec   atomic.Bool
}

// SetVectored records whether every lane's handshake said the peer serves
// scatter-gather requests (wire.Control.Vectored).
func (p *Peer) SetVectored(v bool) { p.vec.Store(v) }

// Vectored reports whether Ops with Ext may be enqueued.
func (p *Peer) Vectored() bool { return p.vec.Load() }

// DialPeer opens all lanes. On error nothing is left open.
func DialPeer(ctx context.Context, cfg PeerConfig, dial Dialer) (*Peer, error) {
	cfg.defaults()
	p := &Peer{cfg: cfg}
	for i := 0; i <= cfg.Lanes; i++ {
		c, err := dial(ctx, i)
		if err != nil {
			p.Fail(err)
			p.Wait()
			return nil, err
		}
		l := newLane(p, c, i == 0)
		p.lanes = append(p.lanes, l)
	}
	return p, nil
}

// Alive reports whether every lane is still up.
func (p *Peer) Alive() bool { return !p.dead.Load() }

// Enqueue sends one slice (len(op.Buf) <= MaxSlice). It fails at once if the
// peer is down; otherwise op.Done is called exactly once later.
func (p *Peer) Enqueue(op *Op) error {
	op.n = op.size()
	if op.n == 0 || uint64(op.n) > p.cfg.MaxSlice {
		return fmt.Errorf("tcp: slice of %d bytes: %w", op.n, ErrProtocol)
	}
	if op.Ext != nil {
		if !p.Vectored() {
			return fmt.Errorf("tcp: the peer serves no scatter-gather requests: %w", ErrProtocol)
		}
		var sum uint64
		for _, e := range op.Ext {
			if e.Length == 0 {
				return fmt.Errorf("tcp: empty extent: %w", ErrProtocol)
			}
			sum += e.Length
		}
		if len(op.Ext) > wire.MaxExtents || sum != uint64(op.n) {
			return fmt.Errorf("tcp: %d extents of %d bytes for %d local bytes: %w", len(op.Ext), sum, op.n, ErrProtocol)
		}
	}
	l := p.pick(op.n, op.Grant)
	return l.enqueue(op)
}

// pick chooses the lane of a slice of n bytes: the one with the fewest
// bytes queued, ties broken round-robin; a slice with a grant goes to the
// grant's home lane (one by its bytes) when nothing is queued there, so
// that a grant used again finds the lane that sent it and is not sent
// again (sentGrant).
func (p *Peer) pick(n int, grant string) *lane {
	start := 1
	if n <= p.cfg.SmallMax {
		start = 0
	}
	cands := p.lanes[start:]
	var off int
	if tail, ok := grantTail(grant); ok {
		off = int(tail % uint64(len(cands)))
	} else {
		off = int(p.rr.Add(1) % uint64(len(cands)))
	}
	best := cands[off]
	bq := best.queued.Load()
	for i := 1; i < len(cands) && bq > 0; i++ {
		c := cands[(off+i)%len(cands)]
		if q := c.queued.Load(); q < bq {
			best, bq = c, q
		}
	}
	return best
}

// Fail closes every lane; their slices complete with err.
func (p *Peer) Fail(err error) {
	p.dead.Store(true)
	for _, l := range p.lanes {
		l.fail(err)
	}
}

// Close is Fail(ErrPeerDown) + Wait.
func (p *Peer) Close() { p.Fail(fmt.Errorf("tcp: peer closed: %w", ErrPeerDown)); p.Wait() }

// Wait returns when every lane goroutine has exited.
func (p *Peer) Wait() {
	for _, l := range p.lanes {
		l.wg.Wait()
	}
}

type lane struct {
	p       *Peer
	express bool
	conn    net.Conn
	queued  atomic.Int64
	wake    chan struct{}
	done    chan struct{}
	ctx     context.Context // ends when the lane fails (bounds the Limiter wait)
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	exits   atomic.Int32

	// sent is the grants this lane sent last, a ring of as many as the
	// server keeps per lane (grant.SetSize), written by the writer
	// goroutine only; sentIdx finds one there by the last bytes of its
	// MAC (sentGrant).
	sent    [grant.SetSize]string
	sentIdx [sentIdxSize]sentEntry
	sentN   uint64 // grants sent

	mu       sync.Mutex
	queue    []*Op
	inflight []*Op
	head     int
	nextID   uint64
	err      error
}

func newLane(p *Peer, c net.Conn, express bool) *lane {
	l := &lane{p: p, conn: c, express: express, wake: make(chan struct{}, 1), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(2)
	go l.writer()
	go l.reader()
	return l
}

func (l *lane) enqueue(op *Op) error {
	op.lane, op.id = l, 0
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.queue = append(l.queue, op)
	l.mu.Unlock()
	l.queued.Add(int64(op.n))
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}

// Fail closes the lane that op went to.
func (op *Op) FailLane(err error) {
	if op.lane != nil {
		op.lane.p.dead.Store(true)
		op.lane.fail(err)
	}
}

func (l *lane) fail(err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = err
	l.mu.Unlock()
	l.p.dead.Store(true)
	close(l.done)
	l.cancel()
	abort(l.conn)
}

// abort closes c with a reset: the slices still in its send buffer are
// being failed to their callers, so they must not reach the peer later
// (a graceful close keeps sending them, and a partitioned link delivers
// them when it heals, long after the transfer gave up). Bytes already on
// the wire can still arrive; the target fences those (transfer.Engine.FenceFrom).
func abort(c net.Conn) {
	if tc, ok := c.(interface{ SetLinger(int) error }); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// exit runs as each goroutine ends; the last one completes what is left.
func (l *lane) exit() {
	if l.exits.Add(1) < 2 {
		return
	}
	l.mu.Lock()
	err := l.err
	left := append(l.inflight[l.head:], l.queue...)
	l.inflight, l.queue, l.head = nil, nil, 0
	l.mu.Unlock()
	for _, op := range left {
		l.queued.Add(-int64(op.n))
		op.Done.OpDone(op, err)
	}
}

func (l *lane) writer() {
	defer l.wg.Done()
	defer l.exit()
	var (
		hdrs []byte
		bufs net.Buffers
		wv   net.Buffers // WriteTo consumes its receiver: bufs keeps its capacity
		take []*Op
	)
	for {
		l.mu.Lock()
		for len(l.queue) == 0 && l.err == nil {
			l.mu.Unlock()
			select {
			case <-l.wake:
			case <-l.done:
			}
			l.mu.Lock()
		}
		if l.err != nil {
			l.mu.Unlock()
			return
		}
		n, bytes, big := 0, 0, false
		for n < len(l.queue) && n < l.p.cfg.MaxBatch && bytes < l.p.cfg.MaxBatchBytes {
			if op := l.queue[n]; op.Write {
				bytes += op.n
				big = big || op.n > l.p.cfg.SmallMax
			}
			n++
		}
		take = append(take[:0], l.queue[:n]...)
		clear(l.queue[:n])
		l.queue = l.queue[n:]
		if len(l.queue) == 0 {
			l.queue = l.queue[:0:0]
		}
		for _, op := range take {
			l.nextID++
			op.id = l.nextID
			l.inflight = append(l.inflight, op)
		}
		l.mu.Unlock()

		hdrs, bufs = hdrs[:0], bufs[:0]
		start := 0
		for _, op := range take {
			if op.Grant != "" && !l.sentGrant(op.Grant) {
				// Padded, so that the payload behind it stays aligned.
				var b [wire.ReqHeaderSize + wire.GrantAlign]byte
				pad := wire.GrantPad(len(op.Grant))
				(&wire.ReqHeader{Op: wire.OpGrant, Addr: uint64(len(op.Grant)), Length: uint64(len(op.Grant) + pad)}).Put(b[:])
				hdrs = append(hdrs, b[:wire.ReqHeaderSize]...)
				hdrs = append(hdrs, op.Grant...)
				hdrs = append(hdrs, b[wire.ReqHeaderSize:wire.ReqHeaderSize+pad]...)
			}
			h := wire.ReqHeader{Op: wire.OpRead, ID: op.id, Addr: op.Remote, Length: uint64(op.n)}
			if op.Write {
				h.Op = wire.OpWrite
			}
			if op.Ext != nil {
				h.Op, h.Addr = wire.OpReadV, uint64(len(op.Ext))
				if op.Write {
					h.Op = wire.OpWriteV
				}
			}
			if l.p.cfg.Checksum {
				h.Flags = wire.FlagCRC
				if op.Write {
					h.CRC = op.crc()
				}
			}
			var b [wire.ReqHeaderSize]byte
			h.Put(b[:])
			hdrs = append(hdrs, b[:]...)
			if op.Ext != nil {
				hdrs = wire.PutExtents(hdrs, op.Ext)
			}
			if op.Write {
				// Earlier slices of hdrs stay valid if this append moved
				// it: they keep the old array, which nothing writes again.
				bufs = append(bufs, hdrs[start:])
				if op.Ext != nil {
					bufs = append(bufs, op.Vec...)
				} else {
					bufs = append(bufs, op.Buf)
				}
				start = len(hdrs)
			}
		}
		if start < len(hdrs) {
			bufs = append(bufs, hdrs[start:])
		}
		clear(take)
		if err := l.limit(bytes); err != nil {
			l.fail(fmt.Errorf("tcp: write: %w: %w", ErrPeerDown, err))
			return
		}
		bulk := big && !l.express && l.p.cfg.Bulk != nil
		if bulk {
			l.p.cfg.Bulk <- struct{}{}
		}
		wv = bufs
		_, err := wv.WriteTo(l.conn)
		clear(bufs) // drop references to the sources
		if bulk {
			<-l.p.cfg.Bulk
		}
		if err != nil {
			l.fail(fmt.Errorf("tcp: write: %w: %w", ErrPeerDown, err))
			return
		}
	}
}

// sentGrant reports whether the lane sent g among its last grant.SetSize
// grants, and remembers it as sent if not. The server keeps the last
// grant.SetSize grants a lane installed (those that verified), so a
// grant among them needs no sending again; the server sees the grants
// in the order the lane sends them. Grants are told apart by their bytes,
// found through sentIdx, a hash table (linear probing, at most half
// full) of the ring's grants keyed by their last 8 bytes (of the MAC): a
// look-up reads an entry or two and, on a match, one string of the ring,
// not the whole ring.
func (l *lane) sentGrant(g string) bool {
	tail, _ := grantTail(g)
	// The table is at most half full: every probe ends at an empty slot.
	for i := tail & (sentIdxSize - 1); l.sentIdx[i].pos != 0; i = (i + 1) & (sentIdxSize - 1) {
		if e := &l.sentIdx[i]; e.tail == tail && l.sent[e.pos-1] == g {
			return true
		}
	}
	pos := int32(l.sentN % grant.SetSize)
	if old := l.sent[pos]; old != "" {
		ot, _ := grantTail(old)
		l.unindex(ot, pos)
	}
	l.sent[pos] = g
	l.sentN++
	for i := tail & (sentIdxSize - 1); ; i = (i + 1) & (sentIdxSize - 1) {
		if l.sentIdx[i].pos == 0 {
			l.sentIdx[i] = sentEntry{tail: tail, pos: pos + 1}
			return false
		}
	}
}

// unindex removes the entry of ring slot pos (whose grant ends in tail)
// from sentIdx, moving back the entries behind it that their probe would
// not find across the hole (Knuth's deletion for linear probing).
func (l *lane) unindex(tail uint64, pos int32) {
	const mask = sentIdxSize - 1
	j := tail & mask
	for k := 0; l.sentIdx[j].pos != pos+1; k++ {
		if k == sentIdxSize {
			return // not indexed (cannot happen)
		}
		j = (j + 1) & mask
	}
	for {
		l.sentIdx[j] = sentEntry{}
		k := j
		for {
			k = (k + 1) & mask
			e := l.sentIdx[k]
			if e.pos == 0 {
				return
			}
			// e stays unless its home slot h lies cyclically outside
			// (j, k]: then its probe passes the hole at j.
			if h := e.tail & mask; j < k && (h <= j || h > k) || j > k && h <= j && h > k {
				l.sentIdx[j] = e
				j = k
				break
			}
		}
	}
}

// sentIdxSize is the number of slots of a lane's index of the grants it
// sent (a power of two, twice the ring).
const sentIdxSize = 2 * grant.SetSize

// sentEntry is a slot of a lane's index of the grants it sent: a grant's
// last 8 bytes and its slot of the ring plus one (0: empty).
type sentEntry struct {
	tail uint64
	pos  int32
}

// grantTail is the last 8 bytes of grant g (of its MAC); ok is false for
// a shorter one.
func grantTail(g string) (tail uint64, ok bool) {
	if len(g) < 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(g[len(g)-8:]), 8)), true
}

// limit waits for n bytes' worth of the Limiter's tokens (in pieces of
// at most its burst); it fails only when the lane does.
func (l *lane) limit(n int) error {
	lim := l.p.cfg.Limiter
	if lim == nil {
		return nil
	}
	burst := max(lim.Burst(), 1)
	for n > 0 {
		k := min(n, burst)
		if err := lim.WaitN(l.ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func (l *lane) reader() {
	defer l.wg.Done()
	defer l.exit()
	r := bufio.NewReaderSize(l.conn, 64<<10)
	var hb [wire.RespHeaderSize]byte
	for {
		// When the next response carries a large READ payload and nothing is
		// buffered, read its header straight from the socket so the payload
		// lands directly in the destination instead of via the buffer.
		var src io.Reader = r
		if r.Buffered() == 0 {
			l.mu.Lock()
			if l.head < len(l.inflight) {
				if op := l.inflight[l.head]; !op.Write && op.n > l.p.cfg.SmallMax {
					src = l.conn
				}
			}
			l.mu.Unlock()
		}
		if _, err := io.ReadFull(src, hb[:]); err != nil {
			l.fail(fmt.Errorf("tcp: read: %w: %w", ErrPeerDown, err))
			return
		}
		h, err := wire.DecodeRespHeader(hb[:], l.p.cfg.MaxSlice)
		if err != nil {
			l.fail(fmt.Errorf("tcp: %w: %w", ErrProtocol, err))
			return
		}
		l.mu.Lock()
		if l.head == len(l.inflight) {
			l.mu.Unlock()
			l.fail(fmt.Errorf("tcp: %w: unsolicited response %d", ErrProtocol, h.ID))
			return
		}
		op := l.inflight[l.head]
		if op.id != h.ID {
			l.mu.Unlock()
			l.fail(fmt.Errorf("tcp: %w: response id %d, want %d", ErrProtocol, h.ID, op.id))
			return
		}
		l.inflight[l.head] = nil
		l.head++
		if l.head == len(l.inflight) {
			l.inflight, l.head = l.inflight[:0], 0
		}
		l.mu.Unlock()

		opErr := statusErr(h.Status)
		if opErr == nil && !op.Write {
			if h.Length != uint64(op.n) {
				err := fmt.Errorf("tcp: %w: read returned %d bytes, want %d", ErrProtocol, h.Length, op.n)
				l.fail(err)
				l.finish(op, err)
				return
			}
			// No bulk token here: a reader must never wait for anything but
			// data, or a writer holding the token while its peer's lane waits
			// for the peer's token (held by a lane sending to this reader)
			// would deadlock.
			if err := op.readPayload(r, l.conn); err != nil {
				err = fmt.Errorf("tcp: read payload: %w: %w", ErrPeerDown, err)
				l.fail(err)
				l.finish(op, err)
				return
			}
			if h.Flags&wire.FlagCRC != 0 && op.crc() != h.CRC {
				opErr = ErrChecksum
			} else if l.p.cfg.Checksum && h.Flags&wire.FlagCRC == 0 {
				opErr = fmt.Errorf("%w: peer sent no checksum", ErrChecksum)
			}
		} else if h.Length != 0 {
			l.fail(fmt.Errorf("tcp: %w: unexpected payload", ErrProtocol))
			l.finish(op, ErrProtocol)
			return
		}
		if opErr != nil {
			opErr = fmt.Errorf("tcp: %s %s: %w", opName(op.Write), op.where(), opErr)
		}
		l.finish(op, opErr)
	}
}

func (l *lane) finish(op *Op, err error) {
	l.queued.Add(-int64(op.n))
	op.Done.OpDone(op, err)
}

// crc is the CRC32C of the op's local bytes.
func (op *Op) crc() uint32 {
	if op.Ext == nil {
		return wire.CRC32C(op.Buf)
	}
	var c uint32
	for _, b := range op.Vec {
		c = crc32.Update(c, castagnoli, b)
	}
	return c
}

// readPayload reads a READ response's payload into the op's local bytes.
func (op *Op) readPayload(r *bufio.Reader, conn net.Conn) error {
	if op.Ext == nil {
		return readPayload(r, conn, op.Buf)
	}
	for _, b := range op.Vec {
		if err := readPayload(r, conn, b); err != nil {
			return err
		}
	}
	return nil
}

// where names the op's remote range(s) for an error.
func (op *Op) where() string {
	if op.Ext == nil {
		return fmt.Sprintf("%#x+%d", op.Remote, len(op.Buf))
	}
	return fmt.Sprintf("%d extents from %#x (%d bytes)", len(op.Ext), op.Ext[0].Addr, op.n)
}

func opName(w bool) string {
	if w {
		return "write"
	}
	return "read"
}

// IsPeerDown reports whether err means the connection broke.
func IsPeerDown(err error) bool { return errors.Is(err, ErrPeerDown) }
