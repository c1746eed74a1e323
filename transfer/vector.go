package transfer

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
)

// Extent is one range of a scatter-gather request (Request.Extents):
// Length bytes between local address Local and the peer's address Remote.
type Extent struct {
	Local  uintptr
	Remote uint64
	Length int
}

// MaxExtents bounds the extents of one scatter-gather request.
const MaxExtents = 1 << 20

// vext is one checked extent of a scatter-gather task: its local bytes
// (pinned by the task) and the peer's address.
type vext struct {
	b      []byte
	remote uint64
}

// checkVector validates a scatter-gather request and pins its local
// memory: every extent non-empty and inside registered host memory, no two
// destination ranges (remote for a WRITE, local for a READ) overlapping.
// Extents adjacent on both sides are merged. On error nothing stays
// pinned.
func (e *Engine) checkVector(t *task) error {
	ext := t.req.Extents
	if len(ext) == 0 || len(ext) > MaxExtents {
		return fmt.Errorf("%w: %d extents (1 to %d)", ErrInvalid, len(ext), MaxExtents)
	}
	if t.req.Local != 0 || t.req.Remote != 0 {
		return fmt.Errorf("%w: a scatter-gather request names its ranges in Extents only", ErrInvalid)
	}
	lo, hi := ^uint64(0), uint64(0)
	var total int
	for i, x := range ext {
		l := uint64(x.Local)
		if x.Length <= 0 || l+uint64(x.Length) < l || x.Remote+uint64(x.Length) < x.Remote {
			return fmt.Errorf("%w: extent %d: local %#x remote %#x length %d", ErrInvalid, i, x.Local, x.Remote, x.Length)
		}
		lo, hi = min(lo, l), max(hi, l+uint64(x.Length))
		total += x.Length
	}
	if t.req.Length != 0 && t.req.Length != total {
		return fmt.Errorf("%w: length %d, extents hold %d bytes", ErrInvalid, t.req.Length, total)
	}
	// Destinations must not overlap (which extent's bytes would land
	// there?); sources may (the same bytes written to several places).
	if t.req.Op == OpRead {
		if err := noOverlap(ext, true); err != nil {
			return fmt.Errorf("%w: read into local %w", ErrInvalid, err)
		}
	} else if err := noOverlap(ext, false); err != nil {
		return fmt.Errorf("%w: write to remote %w", ErrInvalid, err)
	}
	t.req.Length = total
	// One span over every local extent when they share a buffer (the usual
	// case: one region of KV memory), else one per registered buffer they
	// lie in (one region per TP rank).
	t.vec = make([]vext, 0, len(ext))
	if sp, err := e.reg.Acquire(lo, hi-lo); err == nil {
		t.local = sp
		for _, x := range ext {
			off := uint64(x.Local) - lo
			t.vec = appendVext(t.vec, sp.B[off:off+uint64(x.Length)], x.Remote)
		}
		return nil
	}
	for i, x := range ext {
		b, err := t.pinned(e, uint64(x.Local), uint64(x.Length))
		if err != nil {
			t.releaseLocal()
			if errors.Is(err, registry.ErrDevice) {
				return fmt.Errorf("%w: extent %d: scatter-gather requests move host memory only: %w", ErrInvalid, i, err)
			}
			return fmt.Errorf("extent %d: local %#x+%d: %w: %w", i, x.Local, x.Length, ErrNotRegistered, err)
		}
		t.vec = appendVext(t.vec, b, x.Remote)
	}
	return nil
}

// pinned returns the local bytes [addr, addr+n) from a buffer the task
// pinned already, or pins the whole registered buffer holding them.
func (t *task) pinned(e *Engine, addr, n uint64) ([]byte, error) {
	for _, sp := range t.spans {
		base := registry.AddrOf(sp.B)
		if addr >= base && addr+n <= base+uint64(len(sp.B)) {
			return sp.B[addr-base : addr-base+n], nil
		}
	}
	buf, ok := e.reg.Lookup(addr)
	if !ok {
		return nil, fmt.Errorf("%w: %#x", registry.ErrNotRegistered, addr)
	}
	sp, err := e.reg.Acquire(buf.Addr, buf.Length)
	if err != nil {
		return nil, err
	}
	if addr+n > buf.Addr+buf.Length {
		sp.Release()
		return nil, fmt.Errorf("%w: %#x+%d exceeds buffer %#x+%d", registry.ErrOutOfBounds, addr, n, buf.Addr, buf.Length)
	}
	t.spans = append(t.spans, sp)
	return sp.B[addr-buf.Addr : addr-buf.Addr+n], nil
}

// appendVext appends (b, remote) to v, merged into the last extent when
// both its local bytes and its remote range continue that extent's.
func appendVext(v []vext, b []byte, remote uint64) []vext {
	if n := len(v); n > 0 {
		p := &v[n-1]
		if p.remote+uint64(len(p.b)) == remote && adjacent(p.b, b) {
			p.b = p.b[:len(p.b)+len(b)]
			return v
		}
	}
	return append(v, vext{b: b, remote: remote})
}

// adjacent reports whether b starts where a ends, inside a's capacity
// (so a[:len(a)+len(b)] is b's memory appended to a's).
func adjacent(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && cap(a) >= len(a)+len(b) &&
		unsafe.Pointer(unsafe.SliceData(a[len(a):len(a)+1])) == unsafe.Pointer(unsafe.SliceData(b))
}

// noOverlap reports an error when two extents' ranges (local ones, or
// remote ones) overlap.
// The extents of a KV transfer are a few interleaved streams, each
// continuing where it ended (one per TP rank region): those are checked in
// one pass with at most maxStreams streams (each stream ascending, the
// streams' spans disjoint); anything else is sorted.
func noOverlap(ext []Extent, local bool) error {
	addr := func(x Extent) uint64 {
		if local {
			return uint64(x.Local)
		}
		return x.Remote
	}
	const maxStreams = 16
	var st [maxStreams]struct{ lo, end uint64 }
	n := 0
	ok := true
	for _, x := range ext {
		a, e := addr(x), addr(x)+uint64(x.Length)
		k := -1
		for i := range n {
			if st[i].end == a {
				k = i
				break
			}
		}
		if k < 0 && n < maxStreams {
			k, n = n, n+1
			st[k].lo = a
		}
		if k < 0 {
			for i := range n { // the stream ending closest below a
				if st[i].end <= a && (k < 0 || st[i].end > st[k].end) {
					k = i
				}
			}
		}
		if k < 0 {
			ok = false
			break
		}
		st[k].end = e
	}
	if ok {
		spans := st[:n]
		slices.SortFunc(spans, func(x, y struct{ lo, end uint64 }) int { return cmpU64(x.lo, y.lo) })
		for i := 1; i < n; i++ {
			if spans[i].lo < spans[i-1].end {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
	}
	idx := make([]int, len(ext))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmpU64(addr(ext[a]), addr(ext[b])) })
	for k := 1; k < len(idx); k++ {
		p, c := ext[idx[k-1]], ext[idx[k]]
		if addr(c) < addr(p)+uint64(p.Length) {
			return fmt.Errorf("extents %d (%#x+%d) and %d (%#x+%d) overlap", idx[k-1], addr(p), p.Length, idx[k], addr(c), c.Length)
		}
	}
	return nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// releaseLocal unpins the task's local memory.
func (t *task) releaseLocal() {
	t.local.Release()
	for _, sp := range t.spans {
		sp.Release()
	}
	t.local, t.spans = registry.Span{}, nil
}

// Coalesce returns reqs with every run of consecutive requests of the same
// opcode, segment and grant gathered into one scatter-gather request
// (Extents) of at most maxExtents extents (MaxExtents when <= 0);
// requests adjacent in both local and remote memory become one extent
// (Submit merges those). A run of one request stays as it is. The
// requests' order is kept, so the result fails where the input would; a
// request of the result stands for several of reqs. The gathered requests
// must be in host memory.
func Coalesce(reqs []Request, maxExtents int) []Request {
	if maxExtents <= 0 || maxExtents > MaxExtents {
		maxExtents = MaxExtents
	}
	out := make([]Request, 0, len(reqs))
	for i := 0; i < len(reqs); {
		r := reqs[i]
		j := i + 1
		for j < len(reqs) && j-i < maxExtents && len(r.Extents) == 0 && len(reqs[j].Extents) == 0 &&
			reqs[j].Op == r.Op && reqs[j].Segment == r.Segment && reqs[j].Grant == r.Grant {
			j++
		}
		if j == i+1 {
			out = append(out, r)
			i = j
			continue
		}
		ext := make([]Extent, 0, j-i)
		n := 0
		for _, q := range reqs[i:j] {
			ext = append(ext, Extent{Local: q.Local, Remote: q.Remote, Length: q.Length})
			n += q.Length
		}
		out = append(out, Request{Op: r.Op, Segment: r.Segment, Grant: r.Grant, Length: n, Extents: ext})
		i = j
	}
	return out
}
