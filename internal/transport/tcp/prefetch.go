package tcp

import (
	"bufio"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// Prefetcher is a Memory (or Stager) behind which some ranges are slow to
// start reading (a disk tier registered as a transfer.Source): a lane that
// serves a READ tells it which ranges the READs queued behind that one ask
// for, in order, so it can start reading them while the lane sends. Ranges
// that are not its own it ignores; a hint is never a promise that the READ
// will come (the peer may go away).
type Prefetcher interface {
	Prefetch(ranges []wire.Extent)
}

// maxLookahead bounds the requests one look at the lane's input hints.
const maxLookahead = 256

// lookahead tells a Prefetcher of the READs buffered in a lane's input.
// Requests are only hinted once they are whole in the reader's buffer and
// covered by a grant the lane already holds (the same check the lane makes
// when it serves them, without counting a denial); a WRITE ends a look,
// since its payload follows. Each buffered request is looked at once:
// covered counts the requests behind the current one that were already
// looked at.
type lookahead struct {
	pf      Prefetcher
	covered int
	hints   []wire.Extent
	ext     []wire.Extent
}

// next is called for every request header the lane reads; it reports
// whether that request was already looked at (and hinted).
func (la *lookahead) next() bool {
	if la.covered > 0 {
		la.covered--
		return true
	}
	return false
}

// read is called before the lane serves a READ (h, with its extents ext
// for a scatter-gather one) that passed the lane's checks; seen is what
// next said of it. When nothing behind it was looked at yet, it hints the
// READ itself (unless seen) and the READs buffered behind it.
func (la *lookahead) read(r *bufio.Reader, gs *grant.Set, h wire.ReqHeader, ext []wire.Extent, seen bool, maxSlice uint64) {
	if la.covered > 0 {
		return
	}
	la.hints = la.hints[:0]
	if !seen {
		if h.Vectored() {
			la.hints = append(la.hints, ext...)
		} else {
			la.hints = append(la.hints, wire.Extent{Addr: h.Addr, Length: h.Length})
		}
	}
	buf, _ := r.Peek(r.Buffered())
	n := 0
scan:
	for n < maxLookahead && len(buf) >= wire.ReqHeaderSize {
		q, err := wire.DecodeReqHeader(buf[:wire.ReqHeaderSize], maxSlice)
		if err != nil {
			break
		}
		rest := buf[wire.ReqHeaderSize:]
		switch {
		case q.IsWrite():
			break scan
		case q.Op == wire.OpGrant:
			if uint64(len(rest)) < q.Length {
				break scan
			}
			rest = rest[q.Length:]
		case q.Vectored():
			tb := q.Addr * wire.ExtentSize
			if uint64(len(rest)) < tb {
				break scan
			}
			if la.ext, err = wire.DecodeExtents(rest[:tb], q.Addr, q.Length, la.ext); err != nil {
				break scan
			}
			rest = rest[tb:]
			if allows(gs, la.ext) {
				la.hints = append(la.hints, la.ext...)
			}
		default:
			if e := (wire.Extent{Addr: q.Addr, Length: q.Length}); q.Length > 0 && allows(gs, []wire.Extent{e}) {
				la.hints = append(la.hints, e)
			}
		}
		buf = rest
		n++
	}
	la.covered = n
	if len(la.hints) > 0 {
		la.pf.Prefetch(la.hints)
	}
}

// allows reports whether the lane's grants (none: an unchecked lane)
// cover every extent for reading.
func allows(gs *grant.Set, ext []wire.Extent) bool {
	if gs == nil {
		return true
	}
	for _, e := range ext {
		if !gs.Allows(grant.Read, e.Addr, e.Length) {
			return false
		}
	}
	return true
}
