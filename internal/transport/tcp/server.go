package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// Memory is what the lane server needs from the registry.
type Memory interface {
	Acquire(addr, n uint64) (registry.Span, error)
}

var _ Memory = (*registry.Registry)(nil)

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
}

// BulkStall bounds how long a lane may hold a bulk token while moving one payload.
const BulkStall = 10 * time.Second

// inlineMax: READ payloads up to this size are copied into the batched
// response buffer instead of being sent as their own iovec.
const inlineMax = 16 << 10

// ServeLane serves one data lane until the peer closes it or misbehaves. r
// must read from conn (it may hold bytes already buffered after the
// handshake). It returns nil on a clean EOF between requests.
func ServeLane(conn net.Conn, r *bufio.Reader, mem Memory, cfg ServerConfig) error {
	if cfg.MaxSlice == 0 {
		cfg.MaxSlice = DefaultMaxSlice
	}
	var (
		hb  [wire.ReqHeaderSize]byte
		out = make([]byte, 0, 64<<10)
		rb  [wire.RespHeaderSize]byte

		lastLarge bool
	)
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		_, err := conn.Write(out)
		out = out[:0]
		return err
	}
	for {
		if r.Buffered() == 0 {
			if err := flush(); err != nil {
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
		if _, err := io.ReadFull(src, hb[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		h, err := wire.DecodeReqHeader(hb[:], cfg.MaxSlice)
		if err != nil {
			_ = flush()
			return err
		}
		lastLarge = h.Op == wire.OpWrite && h.Length > inlineMax
		resp := wire.RespHeader{ID: h.ID}
		bulk := cfg.Bulk != nil && !cfg.Express && h.Length > cfg.BulkMin
		if bulk {
			cfg.Bulk <- struct{}{}
			// A peer that stalls mid-payload must not keep the token.
			_ = conn.SetDeadline(time.Now().Add(BulkStall))
		}
		err = serveOne(conn, r, mem, h, &resp, &out, rb[:])
		if bulk {
			_ = conn.SetDeadline(time.Time{})
			<-cfg.Bulk
		}
		if err != nil {
			return err
		}
	}
}

// serveOne applies one request; it appends the response to *out, or writes
// it together with a READ payload.
func serveOne(conn net.Conn, r *bufio.Reader, mem Memory, h wire.ReqHeader, resp *wire.RespHeader, out *[]byte, rb []byte) error {
	{
		span, aerr := mem.Acquire(h.Addr, h.Length)
		if h.Op == wire.OpWrite {
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
				span.Release()
				if err != nil {
					return err
				}
			}
			resp.Put(rb)
			*out = append(*out, rb...)
			return nil
		}
		// READ
		if aerr != nil {
			resp.Status = wire.StatusRejected
			resp.Put(rb)
			*out = append(*out, rb...)
			return nil
		}
		resp.Length = h.Length
		if h.Flags&wire.FlagCRC != 0 {
			resp.Flags = wire.FlagCRC
			resp.CRC = wire.CRC32C(span.B)
		}
		resp.Put(rb)
		*out = append(*out, rb...)
		if len(span.B) <= inlineMax {
			*out = append(*out, span.B...)
			span.Release()
			return nil
		}
		bufs := net.Buffers{*out, span.B}
		_, err := bufs.WriteTo(conn)
		span.Release()
		*out = (*out)[:0]
		return err
	}
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
)

func statusErr(s byte) error {
	switch s {
	case wire.StatusOK:
		return nil
	case wire.StatusRejected:
		return ErrRejected
	case wire.StatusChecksum:
		return ErrChecksum
	default:
		return fmt.Errorf("%w (status %d)", ErrBadStatus, s)
	}
}
