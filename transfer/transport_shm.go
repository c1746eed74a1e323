package transfer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/internal/transport/shm"
	"github.com/kvcache-go/mooncake/internal/wire"
)

// shmState is this engine's shared-memory server.
type shmState struct {
	srv  *shm.Server
	path string
}

func (e *Engine) startShm() error {
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf("mooncake-go-%d-%d-%s", os.Getpid(), e.port, hex.EncodeToString(r[:]))
	srv, err := shm.Listen(name, e.shmLookup, e.checkAuth, e.log)
	if err != nil {
		// No unix sockets here: same-host peers will use TCP.
		e.log.Warn("transfer: shared memory unavailable", "err", err)
		return nil
	}
	e.shm = &shmState{srv: srv, path: srv.Path()}
	return nil
}

func (e *Engine) stopShm() {
	if e.shm != nil {
		e.shm.srv.Close()
	}
}

func (e *Engine) revokeShared(id uint64) {
	if e.shm != nil {
		e.shm.srv.Revoke(id)
	}
}

// shmLookup answers a peer's map request: the managed buffer containing addr.
func (e *Engine) shmLookup(addr uint64) (shm.BufInfo, int, error) {
	b, ok := e.reg.Lookup(addr)
	if !ok || !b.Shareable || e.cfg.Grants != nil {
		return shm.BufInfo{}, -1, fmt.Errorf("%#x: %w", addr, shm.ErrNotShareable)
	}
	e.managedMu.Lock()
	defer e.managedMu.Unlock()
	m, ok := e.managed[b.Addr]
	if !ok {
		return shm.BufInfo{}, -1, fmt.Errorf("%#x: %w", addr, shm.ErrNotShareable)
	}
	fd, err := unix.FcntlInt(uintptr(m.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return shm.BufInfo{}, -1, fmt.Errorf("dup memfd: %w", err)
	}
	return shm.BufInfo{Addr: b.Addr, Length: b.Length, ID: b.ID}, fd, nil
}

// shmTransport copies with one memcpy through a mapping of a same-host
// peer's managed (memfd) buffer (internal/transport/shm). It claims a task
// only when the peer is on this host and the remote range lies in one of
// its shareable buffers; the rest goes to TCP.
type shmTransport struct{ e *Engine }

func (*shmTransport) name() string { return TransportShm }

func (tr *shmTransport) newPeer(seg *segment) peer { return &shmPeer{e: tr.e, seg: seg} }

// shmPeer is the connection to one same-host peer's shm server and the
// mappings of its buffers.
type shmPeer struct {
	e   *Engine
	seg *segment

	mu       sync.Mutex
	cl       *shm.Client // nil until first used
	clSocket string      // the socket cl is connected to
	// failedSocket could not be used: stick to TCP until the peer's
	// descriptor names another socket (a restarted peer).
	failedSocket string
}

// reachable returns the peer's descriptor when shared memory can reach it.
func (p *shmPeer) reachable() (wire.Segment, bool) {
	if p.e.shm == nil {
		return wire.Segment{}, false
	}
	p.seg.mu.Lock()
	d := p.seg.desc
	p.seg.mu.Unlock()
	if d.ShmSocket == "" || d.HostID != p.e.hostID {
		return d, false
	}
	return d, true
}

// client returns the connection to the peer's shm server, dialing it if
// needed; nil means use TCP. p.mu is held.
func (p *shmPeer) client(ctx context.Context, d wire.Segment) *shm.Client {
	if d.ShmSocket == p.failedSocket {
		return nil
	}
	if p.cl != nil && p.clSocket != d.ShmSocket {
		p.cl.Close() // the peer restarted: its old server is gone
		p.cl = nil
	}
	if p.cl == nil {
		cl, err := shm.Dial(ctx, d.ShmSocket, p.e.auth(), shm.DialOptions{PopulateWhole: p.e.cfg.ShmPopulateWhole})
		if err != nil {
			p.e.log.Warn("transfer: shared memory to peer unavailable, using tcp", "peer", p.seg.name, "err", err)
			p.failedSocket = d.ShmSocket
			return nil
		}
		p.cl, p.clSocket = cl, d.ShmSocket
	}
	return p.cl
}

// prepare maps every shareable buffer the peer lists, so the first
// transfers make no round trip to map one. The mappings are lazy (see
// package shm): mapping a multi-GiB segment costs the same as a small one,
// and touches none of the peer's memory.
func (p *shmPeer) prepare(ctx context.Context) (bool, error) {
	d, ok := p.reachable()
	if !ok {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.e.cfg.HandshakeTimeout)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	all := true
	for _, b := range d.Buffers {
		if !b.Shareable || b.Length == 0 {
			all = false
			continue
		}
		cl := p.client(ctx, d)
		if cl == nil {
			return false, nil
		}
		sp, err := cl.Acquire(ctx, b.Addr, b.Addr, 1)
		if err != nil {
			p.dropClient(err)
			all = false
			continue
		}
		sp.Release()
	}
	return all, nil
}

// dropClient forgets a broken connection (not a mere refusal to share).
// p.mu is held.
func (p *shmPeer) dropClient(err error) {
	if p.cl != nil && !errors.Is(err, shm.ErrNotShareable) && !errors.Is(err, shm.ErrOutOfBounds) {
		p.cl.Close()
		p.cl = nil
	}
}

func (p *shmPeer) claim(ctx context.Context, t *task) job {
	if t.vec != nil {
		return p.claimVector(ctx, t)
	}
	remote, n := t.req.Remote, uint64(t.req.Length)
	j, retry := p.target(ctx, remote, n)
	if j == nil && retry && p.seg.descStale() {
		// The range is in no buffer we know of, or past the end of the one
		// we mapped: the peer may have allocated (or reallocated) managed
		// memory since we fetched its descriptor. Refetch it once.
		rctx, cancel := context.WithTimeout(ctx, p.e.cfg.HandshakeTimeout)
		if p.e.refresh(rctx, p.seg) == nil {
			j, _ = p.target(rctx, remote, n)
		}
		cancel()
	}
	if j == nil {
		return nil // TCP serves it
	}
	return j
}

// target returns a job copying through a mapped view of the peer's
// [remote, remote+n), or nil (use TCP). retry says the cached descriptor
// may be out of date: the range lies in no buffer it lists, or outside the
// mapped buffer.
func (p *shmPeer) target(ctx context.Context, remote, n uint64) (_ *shmJob, retry bool) {
	d, ok := p.reachable()
	if !ok {
		return nil, false
	}
	var base uint64
	found, known := false, false
	for _, b := range d.Buffers {
		if remote >= b.Addr && remote+n >= remote && remote+n <= b.Addr+b.Length {
			known = true
			if b.Shareable {
				base, found = b.Addr, true
			}
			break
		}
	}
	if !found {
		return nil, !known
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cl != nil && p.clSocket == d.ShmSocket {
		// The common case: connected, and the buffer already mapped. No
		// round trip, so no timer.
		if sp, ok := p.cl.AcquireMapped(base, remote, n); ok {
			return &shmJob{span: sp}, false
		}
	}
	ctx, cancel := context.WithTimeout(ctx, p.e.cfg.HandshakeTimeout)
	defer cancel()
	cl := p.client(ctx, d)
	if cl == nil {
		return nil, false
	}
	sp, err := cl.Acquire(ctx, base, remote, n)
	if err != nil {
		p.dropClient(err)
		return nil, errors.Is(err, shm.ErrOutOfBounds)
	}
	return &shmJob{span: sp}, false
}

func (p *shmPeer) close(error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cl != nil {
		p.cl.Close()
		p.cl = nil
	}
}

// shmJob is one task's view into a peer's mapped buffer.
type shmJob struct{ span shm.Span }

func (j *shmJob) slices() int { return 1 }
func (j *shmJob) async() bool { return false }
func (j *shmJob) abort(error) {}
func (j *shmJob) drop()       { j.span.Release() }

func (j *shmJob) run(_ context.Context, b *Batch, t *task) {
	if t.req.Op == OpWrite {
		copy(j.span.B, t.local.B)
	} else {
		copy(t.local.B, j.span.B)
	}
	j.span.Release()
	b.sliceDone(t, nil)
}

// claimVector is claim for a scatter-gather task: one mapped span per
// peer buffer its extents lie in (over the extents' bounding range in that
// buffer), or nil (TCP serves it) when one lies in no shareable buffer.
func (p *shmPeer) claimVector(ctx context.Context, t *task) job {
	j, retry := p.targetVector(ctx, t.vec)
	if j == nil && retry && p.seg.descStale() {
		rctx, cancel := context.WithTimeout(ctx, p.e.cfg.HandshakeTimeout)
		if p.e.refresh(rctx, p.seg) == nil {
			j, _ = p.targetVector(rctx, t.vec)
		}
		cancel()
	}
	if j == nil {
		return nil
	}
	return j
}

// vrange is the bounding range of a scatter-gather task's extents in one
// buffer of the peer.
type vrange struct{ base, end, lo, hi uint64 }

func (p *shmPeer) targetVector(ctx context.Context, vec []vext) (_ *shmVecJob, retry bool) {
	d, ok := p.reachable()
	if !ok {
		return nil, false
	}
	var rs []vrange
	where := make([]int32, len(vec))
	for i, x := range vec {
		r, n := x.remote, uint64(len(x.b))
		k := -1
		for q := range rs {
			if r >= rs[q].base && r+n >= r && r+n <= rs[q].end {
				k = q
				break
			}
		}
		if k < 0 {
			found, known := false, false
			for _, b := range d.Buffers {
				if r >= b.Addr && r+n >= r && r+n <= b.Addr+b.Length {
					known, found = true, b.Shareable
					if found {
						rs = append(rs, vrange{base: b.Addr, end: b.Addr + b.Length, lo: r, hi: r + n})
						k = len(rs) - 1
					}
					break
				}
			}
			if !found {
				return nil, !known
			}
		}
		rs[k].lo, rs[k].hi = min(rs[k].lo, r), max(rs[k].hi, r+n)
		where[i] = int32(k)
	}
	j := &shmVecJob{where: where, lo: make([]uint64, len(rs))}
	for k, rg := range rs {
		sj, retry := p.target(ctx, rg.lo, rg.hi-rg.lo)
		if sj == nil {
			j.drop()
			return nil, retry
		}
		j.spans = append(j.spans, sj.span)
		j.lo[k] = rg.lo
	}
	return j, false
}

// shmVecJob is a scatter-gather task's views into a peer's mapped
// buffers: extent i lies in spans[where[i]], which starts at lo[where[i]].
type shmVecJob struct {
	spans []shm.Span
	lo    []uint64
	where []int32
}

func (j *shmVecJob) slices() int { return 1 }
func (j *shmVecJob) async() bool { return false }
func (j *shmVecJob) abort(error) {}

func (j *shmVecJob) drop() {
	for _, sp := range j.spans {
		sp.Release()
	}
	j.spans = nil
}

func (j *shmVecJob) run(_ context.Context, b *Batch, t *task) {
	write := t.req.Op == OpWrite
	if len(j.spans) == 1 { // every extent in one buffer of the peer
		mem, lo := j.spans[0].B, j.lo[0]
		for _, x := range t.vec {
			off := x.remote - lo
			if write {
				copy(mem[off:off+uint64(len(x.b))], x.b)
			} else {
				copy(x.b, mem[off:off+uint64(len(x.b))])
			}
		}
		j.drop()
		b.sliceDone(t, nil)
		return
	}
	for i, x := range t.vec {
		k := j.where[i]
		off := x.remote - j.lo[k]
		dst := j.spans[k].B[off : off+uint64(len(x.b))]
		if write {
			copy(dst, x.b)
		} else {
			copy(x.b, dst)
		}
	}
	j.drop()
	b.sliceDone(t, nil)
}
