package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"

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
}

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
		if _, err := io.ReadFull(r, hb[:]); err != nil {
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
		resp := wire.RespHeader{ID: h.ID}
		span, aerr := mem.Acquire(h.Addr, h.Length)
		if h.Op == wire.OpWrite {
			if aerr != nil {
				if _, err := io.CopyN(io.Discard, r, int64(h.Length)); err != nil {
					return err
				}
				resp.Status = wire.StatusRejected
			} else {
				_, err := io.ReadFull(r, span.B)
				if err == nil && h.Flags&wire.FlagCRC != 0 && wire.CRC32C(span.B) != h.CRC {
					resp.Status = wire.StatusChecksum
				}
				span.Release()
				if err != nil {
					return err
				}
			}
			resp.Put(rb[:])
			out = append(out, rb[:]...)
			continue
		}
		// READ
		if aerr != nil {
			resp.Status = wire.StatusRejected
			resp.Put(rb[:])
			out = append(out, rb[:]...)
			continue
		}
		resp.Length = h.Length
		if h.Flags&wire.FlagCRC != 0 {
			resp.Flags = wire.FlagCRC
			resp.CRC = wire.CRC32C(span.B)
		}
		resp.Put(rb[:])
		out = append(out, rb[:]...)
		if len(span.B) <= inlineMax {
			out = append(out, span.B...)
			span.Release()
			continue
		}
		bufs := net.Buffers{out, span.B}
		_, err = bufs.WriteTo(conn)
		span.Release()
		out = out[:0]
		if err != nil {
			return err
		}
	}
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
