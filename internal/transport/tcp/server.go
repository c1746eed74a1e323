package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// Memory is what the lane server needs from the registry.
type Memory interface {
	Acquire(addr, n uint64) (registry.Span, error)
}

var _ Memory = (*registry.Registry)(nil)

// Stager is a Memory that holds memory the host cannot touch (GPU memory):
// a lane that serves one asks it, knowing the request's direction, for a
// span of host bytes standing in for the memory. AcquireRead's span holds
// a copy of [addr, addr+n); AcquireWrite's span receives the payload, and
// commit (nil for host memory) puts it in place once it arrived whole and
// checked. Host memory is returned as Acquire returns it.
type Stager interface {
	AcquireRead(addr, n uint64) (registry.Span, error)
	AcquireWrite(addr, n uint64) (span registry.Span, commit func() error, err error)
}

// ServerConfig bounds what a lane accepts.
type ServerConfig struct {
	MaxSlice uint64 // largest slice accepted; longer requests end the lane
	// Bulk, when set, is a semaphore shared by all lanes of the engine: a
	// lane holds a token while it moves a payload larger than BulkMin, so
	// that at most cap(Bulk) goroutines stream at once and the remaining Ps
	// stay free to notice small requests (the Go scheduler only polls the
	// network when a P runs out of work). Express lanes never take it.
	Bulk    chan struct{}
	BulkMin uint64
	Express bool
	// Grants, when set, makes the lane capability-checked: every READ and
	// WRITE must lie inside a grant for Segment that the peer installed on
	// this lane (OpGrant) and that is still valid; others are answered
	// StatusDenied without touching memory (a WRITE's payload is drained).
	Grants  *grant.Verifier
	Segment string
}

// BulkStall bounds how long a lane may hold a bulk token while moving one payload.
const BulkStall = 10 * time.Second

// inlineMax: READ payloads up to this size are copied into the batched
// response buffer instead of being sent as their own iovec.
const inlineMax = 16 << 10

// maxGather bounds the READ payload bytes a lane gathers into one writev.
const maxGather = 1 << 20

// ServeLane serves one data lane until the peer closes it or misbehaves. r
// must read from conn (it may hold bytes already buffered after the
// handshake). It returns nil on a clean EOF between requests.
func ServeLane(conn net.Conn, r *bufio.Reader, mem Memory, cfg ServerConfig) error {
	if cfg.MaxSlice == 0 {
		cfg.MaxSlice = DefaultMaxSlice
	}
	var (
		hb        [wire.ReqHeaderSize]byte
		pending   bool // hb holds the next request's header (read with a grant)
		lastLarge bool
		o         = &outbox{out: make([]byte, 0, 64<<10)}
		gs        *grant.Set
		gbuf      []byte
		etab      []byte        // a scatter-gather request's extent table
		ext       []wire.Extent // its extents, decoded
	)
	if cfg.Grants != nil {
		gs = cfg.Grants.NewSet(cfg.Segment)
	}
	defer o.release()
	st, _ := mem.(Stager)
	var la *lookahead
	if pf, ok := mem.(Prefetcher); ok {
		la = &lookahead{pf: pf}
	}
	for {
		// Flush when no whole request header is buffered (the next read
		// may block), or when enough READ payload is gathered (in place or
		// copied inline).
		if r.Buffered() < wire.ReqHeaderSize || o.bytes >= maxGather || len(o.out) >= maxGather {
			if err := o.flush(conn, cfg); err != nil {
				return err
			}
		}
		// After a large WRITE the next one is likely large too: read its
		// header straight from the socket (when nothing is buffered) so the
		// payload goes directly into registered memory, not via the buffer.
		var src io.Reader = r
		if lastLarge && r.Buffered() == 0 {
			src = conn
		}
		if !pending {
			if _, err := io.ReadFull(src, hb[:]); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
		pending = false
		h, err := wire.DecodeReqHeader(hb[:], cfg.MaxSlice)
		if err != nil {
			_ = o.flush(conn, cfg)
			return err
		}
		seen := la != nil && la.next()
		if h.Op == wire.OpGrant {
			// Verified once here; the lane's READs and WRITEs are then
			// checked against the set with a few comparisons each. A grant
			// that does not verify is counted by the verifier and dropped.
			if gbuf == nil {
				gbuf = make([]byte, wire.MaxGrant+wire.ReqHeaderSize)
			}
			if src == conn {
				// Between large WRITEs: the grant and the header of the
				// request it comes in front of (a peer sends them
				// together) straight from the socket, so that r does not
				// read ahead into that request's payload.
				if _, err := io.ReadFull(conn, gbuf[:h.Length+wire.ReqHeaderSize]); err != nil {
					return err
				}
				copy(hb[:], gbuf[h.Length:])
				pending = true
			} else if _, err := io.ReadFull(r, gbuf[:h.Length]); err != nil {
				return err
			}
			if gs != nil {
				_ = gs.Install(gbuf[:h.GrantLen()])
			}
			continue
		}
		lastLarge = h.IsWrite() && h.Length > inlineMax
		if h.Vectored() {
			// The extent table follows the header; every extent is checked
			// (grants, then bounds) before any memory is touched.
			if etab == nil {
				etab = make([]byte, wire.MaxExtents*wire.ExtentSize)
			}
			tb := etab[:h.Addr*wire.ExtentSize]
			if _, err := io.ReadFull(r, tb); err != nil {
				return err
			}
			if ext, err = wire.DecodeExtents(tb, h.Addr, h.Length, ext); err != nil {
				_ = o.flush(conn, cfg)
				return err
			}
		}
		if gs != nil && !allowedAll(gs, h, ext) {
			if h.IsWrite() {
				if _, err := io.CopyN(io.Discard, r, int64(h.Length)); err != nil {
					return err
				}
				lastLarge = false
			}
			o.header(&wire.RespHeader{ID: h.ID, Status: wire.StatusDenied})
			continue
		}
		if !h.IsWrite() {
			// READ: the response (and its payload) joins the outbox; the
			// payload is sent by the next flush, gathered with its neighbours
			// into one writev. A Prefetcher first hears of it and of the
			// READs queued behind it (prefetch.go).
			if la != nil {
				la.read(r, gs, h, ext, seen, cfg.MaxSlice)
			}
			if h.Vectored() {
				o.addReadV(mem, st, h, ext)
			} else {
				o.addRead(mem, st, h)
			}
			continue
		}
		// A WRITE payload may block on the peer: send gathered READ payloads
		// first, so no span is held while waiting for input. (Response
		// headers alone keep waiting for the input to drain.)
		if len(o.iov) > 0 {
			if err := o.flush(conn, cfg); err != nil {
				return err
			}
		}
		bulk := cfg.Bulk != nil && !cfg.Express && h.Length > cfg.BulkMin
		if bulk {
			cfg.Bulk <- struct{}{}
			// A peer that stalls mid-payload must not keep the token.
			_ = conn.SetDeadline(time.Now().Add(BulkStall))
		}
		if h.Vectored() {
			err = serveWriteV(conn, r, mem, st, h, ext, o)
		} else {
			err = serveWrite(conn, r, mem, st, h, o)
		}
		if bulk {
			_ = conn.SetDeadline(time.Time{})
			<-cfg.Bulk
		}
		if err != nil {
			return err
		}
	}
}

// allowedAll reports whether the lane's grants cover request h: its
// range, or every extent of a scatter-gather request.
func allowedAll(gs *grant.Set, h wire.ReqHeader, ext []wire.Extent) bool {
	mode := grant.Read
	if h.IsWrite() {
		mode = grant.Write
	}
	if !h.Vectored() {
		return gs.Allow(mode, h.Addr, h.Length) == nil
	}
	for _, e := range ext {
		if gs.Allow(mode, e.Addr, e.Length) != nil {
			return false
		}
	}
	return true
}

// outbox gathers a lane's responses: headers and small READ payloads are
// appended to out; large READ payloads are referenced in place (iov) and sent
// straight from registered memory by flush, in order, with one writev.
type outbox struct {
	out   []byte
	mark  int // out[mark:] is not yet in iov
	iov   net.Buffers
	wv    net.Buffers // what flush hands to WriteTo (which consumes it), kept here so it does not escape per call
	spans []registry.Span
	bytes uint64 // large READ payload bytes in iov
	rb    [wire.RespHeaderSize]byte
}

func (o *outbox) header(resp *wire.RespHeader) {
	resp.Put(o.rb[:])
	o.out = append(o.out, o.rb[:]...)
}

// addRead applies one READ request. Slices of out taken into iov stay valid
// when a later append moves out: they keep the old array, which no one
// writes again before the flush.
func (o *outbox) addRead(mem Memory, st Stager, h wire.ReqHeader) {
	resp := wire.RespHeader{ID: h.ID}
	var span registry.Span
	var err error
	if st != nil {
		span, err = st.AcquireRead(h.Addr, h.Length)
	} else {
		span, err = mem.Acquire(h.Addr, h.Length)
	}
	if err != nil {
		resp.Status = wire.StatusRejected
		o.header(&resp)
		return
	}
	resp.Length = h.Length
	if h.Flags&wire.FlagCRC != 0 {
		resp.Flags = wire.FlagCRC
		resp.CRC = wire.CRC32C(span.B)
	}
	o.header(&resp)
	if len(span.B) <= inlineMax {
		o.out = append(o.out, span.B...)
		span.Release()
		return
	}
	o.iov = append(o.iov, o.out[o.mark:], span.B)
	o.mark = len(o.out)
	o.spans = append(o.spans, span)
	o.bytes += h.Length
}

// flush sends everything gathered, holding a bulk token (and the stall
// deadline) while large payloads go out.
func (o *outbox) flush(conn net.Conn, cfg ServerConfig) error {
	if len(o.iov) == 0 {
		if len(o.out) == 0 {
			return nil
		}
		_, err := conn.Write(o.out)
		o.out = o.out[:0]
		return err
	}
	if o.mark < len(o.out) {
		o.iov = append(o.iov, o.out[o.mark:])
	}
	bulk := cfg.Bulk != nil && !cfg.Express && o.bytes > cfg.BulkMin
	if bulk {
		cfg.Bulk <- struct{}{}
		_ = conn.SetDeadline(time.Now().Add(BulkStall))
	}
	o.wv = o.iov
	_, err := o.wv.WriteTo(conn)
	o.wv = nil
	if bulk {
		_ = conn.SetDeadline(time.Time{})
		<-cfg.Bulk
	}
	o.release()
	return err
}

// release drops the spans and resets the outbox.
func (o *outbox) release() {
	for _, s := range o.spans {
		s.Release()
	}
	clear(o.spans)
	clear(o.iov)
	o.spans, o.iov = o.spans[:0], o.iov[:0]
	o.out, o.mark, o.bytes = o.out[:0], 0, 0
}

// serveWrite applies one WRITE request and appends its response to the outbox.
func serveWrite(conn net.Conn, r *bufio.Reader, mem Memory, st Stager, h wire.ReqHeader, o *outbox) error {
	resp := wire.RespHeader{ID: h.ID}
	var span registry.Span
	var commit func() error
	var aerr error
	if st != nil {
		span, commit, aerr = st.AcquireWrite(h.Addr, h.Length)
	} else {
		span, aerr = mem.Acquire(h.Addr, h.Length)
	}
	if aerr != nil {
		if _, err := io.CopyN(io.Discard, r, int64(h.Length)); err != nil {
			return err
		}
		resp.Status = wire.StatusRejected
	} else {
		err := readPayload(r, conn, span.B)
		if err == nil && h.Flags&wire.FlagCRC != 0 && wire.CRC32C(span.B) != h.CRC {
			resp.Status = wire.StatusChecksum
		}
		if err == nil && resp.Status == wire.StatusOK && commit != nil && commit() != nil {
			resp.Status = wire.StatusRejected
		}
		span.Release()
		if err != nil {
			return err
		}
	}
	o.header(&resp)
	return nil
}

// readPayload fills p: first from what r has buffered, then straight from
// conn, so that a large payload is copied once (socket -> destination) and
// r does not read ahead into its own buffer.
func readPayload(r *bufio.Reader, conn net.Conn, p []byte) error {
	if len(p) <= r.Size() {
		_, err := io.ReadFull(r, p)
		return err
	}
	n := min(r.Buffered(), len(p))
	if n > 0 {
		if _, err := io.ReadFull(r, p[:n]); err != nil {
			return err
		}
	}
	_, err := io.ReadFull(conn, p[n:])
	return err
}

// Errors a lane reports for a slice.
var (
	ErrRejected  = errors.New("peer rejected the address range")
	ErrChecksum  = errors.New("checksum mismatch")
	ErrPeerDown  = errors.New("peer connection lost")
	ErrProtocol  = errors.New("protocol error")
	ErrBadStatus = errors.New("peer reported a bad request")
	// ErrDenied: the peer checks grants and none of this lane's covered
	// the slice.
	ErrDenied = errors.New("peer refused: no grant covers the range")
)

func statusErr(s byte) error {
	switch s {
	case wire.StatusOK:
		return nil
	case wire.StatusRejected:
		return ErrRejected
	case wire.StatusChecksum:
		return ErrChecksum
	case wire.StatusDenied:
		return ErrDenied
	default:
		return fmt.Errorf("%w (status %d)", ErrBadStatus, s)
	}
}
