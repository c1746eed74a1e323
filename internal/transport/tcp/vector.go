package tcp

import (
	"bufio"
	"hash/crc32"
	"io"
	"net"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// Scatter-gather requests (wire.OpReadV, wire.OpWriteV) on the server: one
// header, an extent table and one response for many ranges of registered
// memory. Every extent is acquired (bounds-checked) before any byte moves;
// one that fails rejects the whole request (a WRITE's payload is drained,
// nothing is written) and the lane keeps serving.

// vspans acquires every extent: for a READ a span holding its bytes, for a
// WRITE one receiving them plus the commit (nil for host memory). An
// extent may run across registered buffers that lie back to back (the
// client merges ranges adjacent in the peer's address space without
// knowing where its buffers end): where the memory can tell where a buffer
// ends (BufferEnder), it is acquired one buffer at a time, each piece
// bounds-checked on its own. On error nothing stays acquired.
func vspans(mem Memory, st Stager, write bool, ext []wire.Extent) ([]registry.Span, []func() error, error) {
	var ender BufferEnder
	if b, ok := st.(BufferEnder); ok {
		ender = b
	} else if b, ok := mem.(BufferEnder); ok {
		ender = b
	}
	acquire := func(addr, n uint64) (registry.Span, func() error, error) {
		switch {
		case st != nil && write:
			return st.AcquireWrite(addr, n)
		case st != nil:
			sp, err := st.AcquireRead(addr, n)
			return sp, nil, err
		default:
			sp, err := mem.Acquire(addr, n)
			return sp, nil, err
		}
	}
	spans := make([]registry.Span, 0, len(ext))
	var commits []func() error
	for _, e := range ext {
		addr, left := e.Addr, e.Length
		for left > 0 {
			n := left
			sp, commit, err := acquire(addr, n)
			if err != nil && ender != nil {
				// Only a refused extent asks where its buffer ends.
				if end, ok := ender.BufferEnd(addr); ok && end > addr && end-addr < n {
					n = end - addr
					sp, commit, err = acquire(addr, n)
				}
			}
			if err != nil {
				for _, s := range spans {
					s.Release()
				}
				return nil, nil, err
			}
			spans = append(spans, sp)
			if commit != nil && commits == nil {
				commits = make([]func() error, len(spans)-1, cap(spans))
			}
			if commits != nil {
				commits = append(commits, commit)
			}
			addr, left = addr+n, left-n
		}
	}
	return spans, commits, nil
}

// BufferEnder is implemented by a Memory (or Stager) that can tell where
// the registered buffer holding addr ends.
type BufferEnder interface {
	BufferEnd(addr uint64) (end uint64, ok bool)
}

// addReadV applies one scatter-gather READ: the response header, then the
// extents' bytes in order (small ones copied into out, large ones
// referenced in place, as addRead does).
func (o *outbox) addReadV(mem Memory, st Stager, h wire.ReqHeader, ext []wire.Extent) {
	resp := wire.RespHeader{ID: h.ID}
	spans, _, err := vspans(mem, st, false, ext)
	if err != nil {
		resp.Status = wire.StatusRejected
		o.header(&resp)
		return
	}
	resp.Length = h.Length
	if h.Flags&wire.FlagCRC != 0 {
		resp.Flags = wire.FlagCRC
		var c uint32
		for _, sp := range spans {
			c = crc32.Update(c, castagnoli, sp.B)
		}
		resp.CRC = c
	}
	o.header(&resp)
	for _, sp := range spans {
		if len(sp.B) <= inlineMax {
			o.out = append(o.out, sp.B...)
			sp.Release()
			continue
		}
		o.iov = append(o.iov, o.out[o.mark:], sp.B)
		o.mark = len(o.out)
		o.spans = append(o.spans, sp)
		o.bytes += uint64(len(sp.B))
	}
}

// serveWriteV applies one scatter-gather WRITE: the payload is read
// straight into the extents, in order.
func serveWriteV(conn net.Conn, r *bufio.Reader, mem Memory, st Stager, h wire.ReqHeader, ext []wire.Extent, o *outbox) error {
	resp := wire.RespHeader{ID: h.ID}
	spans, commits, err := vspans(mem, st, true, ext)
	if err != nil {
		if _, err := io.CopyN(io.Discard, r, int64(h.Length)); err != nil {
			return err
		}
		resp.Status = wire.StatusRejected
		o.header(&resp)
		return nil
	}
	defer func() {
		for _, sp := range spans {
			sp.Release()
		}
	}()
	var c uint32
	for _, sp := range spans {
		if err := readPayload(r, conn, sp.B); err != nil {
			return err
		}
		if h.Flags&wire.FlagCRC != 0 {
			c = crc32.Update(c, castagnoli, sp.B)
		}
	}
	if h.Flags&wire.FlagCRC != 0 && c != h.CRC {
		resp.Status = wire.StatusChecksum
	}
	for _, commit := range commits {
		if resp.Status == wire.StatusOK && commit != nil && commit() != nil {
			resp.Status = wire.StatusRejected
		}
	}
	o.header(&resp)
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
