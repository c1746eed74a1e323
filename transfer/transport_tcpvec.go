package transfer

import (
	"sync/atomic"

	"github.com/kvcache-go/mooncake/internal/transport/tcp"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// claimVector cuts a scatter-gather task into slices of at most
// Config.SliceSize bytes and wire.MaxExtents extents, in extent order (an
// extent crossing a slice boundary is split), each slice one
// scatter-gather op: its remote ranges (adjacent ones merged) and its
// local pieces (adjacent ones merged), which need not line up.
func (p *tcpPeer) claimVector(t *task) job {
	size := p.e.cfg.SliceSize
	j := &tcpJob{peer: p, vector: true}
	n := -1 // bytes in the last op; -1: no op yet
	for _, x := range t.vec {
		b, r := x.b, x.remote
		for len(b) > 0 {
			if n < 0 || n == size || len(j.ops[len(j.ops)-1].Ext) == wire.MaxExtents {
				j.ops = append(j.ops, tcp.Op{})
				n = 0
			}
			op := &j.ops[len(j.ops)-1]
			k := min(len(b), size-n)
			piece := b[:k:k]
			if m := len(op.Ext); m > 0 && op.Ext[m-1].Addr+op.Ext[m-1].Length == r {
				op.Ext[m-1].Length += uint64(k)
			} else {
				op.Ext = append(op.Ext, wire.Extent{Addr: r, Length: uint64(k)})
			}
			if m := len(op.Vec); m > 0 && adjacent(op.Vec[m-1], b) {
				last := op.Vec[m-1]
				op.Vec[m-1] = last[: len(last)+k : len(last)+k]
			} else {
				op.Vec = append(op.Vec, piece)
			}
			n += k
			b, r = b[k:], r+uint64(k)
		}
	}
	return j
}

// runVector enqueues the scatter-gather slices, or, when the peer's lanes
// serve no scatter-gather requests (an older peer), their pieces as plain
// slices, each slice completing once all its pieces did.
func (j *tcpJob) runVector(p *tcp.Peer, err error, b *Batch, t *task) {
	write := t.req.Op == OpWrite
	for s := range j.ops {
		op := &j.ops[s]
		op.Write, op.Done, op.Tag, op.Grant = write, (*batchOps)(b), t.index, t.req.Grant
	}
	if err == nil && !p.Vectored() {
		j.splitPlain()
	}
	for s := range j.ops {
		op := &j.ops[s]
		if err == nil {
			if j.sub == nil {
				err = p.Enqueue(op)
			} else {
				err = j.fans[s].enqueue(p)
			}
		}
		if err != nil {
			b.sliceDone(t, err)
		}
	}
}

// splitPlain makes the plain pieces of every scatter-gather slice: ranges
// contiguous on both sides.
func (j *tcpJob) splitPlain() {
	var cuts [][2]int // per op: [first, end) in sub
	for s := range j.ops {
		op := &j.ops[s]
		first := len(j.sub)
		vi, voff := 0, 0
		for _, e := range op.Ext {
			r, left := e.Addr, int(e.Length)
			for left > 0 {
				v := op.Vec[vi][voff:]
				k := min(left, len(v))
				j.sub = append(j.sub, tcp.Op{Write: op.Write, Remote: r, Buf: v[:k:k], Grant: op.Grant, Tag: op.Tag})
				r, left, voff = r+uint64(k), left-k, voff+k
				if voff == len(op.Vec[vi]) {
					vi, voff = vi+1, 0
				}
			}
		}
		cuts = append(cuts, [2]int{first, len(j.sub)})
	}
	j.fans = make([]vecFanIn, len(j.ops))
	for s, c := range cuts {
		f := &j.fans[s]
		f.parent, f.subs = &j.ops[s], j.sub[c[0]:c[1]]
		f.left.Store(int32(len(f.subs)))
		for i := range f.subs {
			f.subs[i].Done = f
		}
	}
}

// vecFanIn completes a scatter-gather slice sent as plain pieces once
// every piece completed, with the first piece's error.
type vecFanIn struct {
	parent *tcp.Op
	subs   []tcp.Op
	left   atomic.Int32
	err    atomic.Pointer[error]
}

// enqueue sends every piece; a piece that cannot be enqueued completes
// (fails) at once, and the first such error is returned only when no
// piece was enqueued (then the caller fails the slice itself).
func (f *vecFanIn) enqueue(p *tcp.Peer) error {
	for i := range f.subs {
		if err := p.Enqueue(&f.subs[i]); err != nil {
			if i == 0 {
				return err
			}
			for k := i; k < len(f.subs); k++ {
				f.OpDone(&f.subs[k], err)
			}
			return nil
		}
	}
	return nil
}

// OpDone implements tcp.Completer.
func (f *vecFanIn) OpDone(_ *tcp.Op, err error) {
	if err != nil {
		f.err.CompareAndSwap(nil, &err)
	}
	if f.left.Add(-1) != 0 {
		return
	}
	var first error
	if ep := f.err.Load(); ep != nil {
		first = *ep
	}
	f.parent.Done.OpDone(f.parent, first)
}
