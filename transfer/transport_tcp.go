package transfer

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/transport/tcp"
)

// tcpTransport sends slices over pipelined TCP lanes
// (internal/transport/tcp). It claims every task.
type tcpTransport struct{ e *Engine }

func (*tcpTransport) name() string { return TransportTCP }

func (tr *tcpTransport) newPeer(seg *segment) peer { return &tcpPeer{e: tr.e, seg: seg} }

// tcpPeer is the lanes to one peer, dialed on first use and again after
// they broke.
type tcpPeer struct {
	e   *Engine
	seg *segment

	mu sync.Mutex
	p  *tcp.Peer
	// dialErr is the last failed dial of lanes (at dialAt).
	dialErr error
	dialAt  time.Time
}

func (p *tcpPeer) prepare(ctx context.Context) (bool, error) {
	_, err := p.lanes(ctx)
	return true, err
}

func (p *tcpPeer) claim(_ context.Context, t *task) job {
	if t.vec != nil {
		return p.claimVector(t)
	}
	n := (t.req.Length + p.e.cfg.SliceSize - 1) / p.e.cfg.SliceSize
	j := &tcpJob{peer: p}
	if n == 1 {
		j.ops = j.one[:]
	} else {
		j.ops = make([]tcp.Op, n)
	}
	return j
}

func (p *tcpPeer) close(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p != nil {
		p.p.Fail(err)
		p.p.Wait()
	}
}

// lanes returns live lanes to the peer, dialing them if needed.
func (p *tcpPeer) lanes(ctx context.Context) (*tcp.Peer, error) {
	e := p.e
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p != nil && p.p.Alive() {
		return p.p, nil
	}
	if p.p != nil {
		p.p.Close()
		p.p = nil
	}
	if e.closed.Load() {
		return nil, ErrClosed
	}
	// Many slices may come back to redial at once after a lane broke: a
	// dial that just failed answers them all for a moment.
	if p.dialErr != nil && time.Since(p.dialAt) < 500*time.Millisecond {
		return nil, p.dialErr
	}
	p.seg.mu.Lock()
	d := p.seg.desc
	p.seg.mu.Unlock()
	addr := net.JoinHostPort(d.IP, strconv.Itoa(d.TCPDataPort))
	if d.IP == "" || d.TCPDataPort == 0 {
		addr = p.seg.name
	}
	cfg := tcp.PeerConfig{Lanes: e.cfg.Lanes, SmallMax: e.cfg.SmallMax, Checksum: e.cfg.Checksum, MaxSlice: uint64(e.cfg.MaxSlice), Bulk: e.clientBulk}
	if e.link != nil {
		cfg.Limiter = e.link
	}
	vectored := true
	tp, err := tcp.DialPeer(ctx, cfg, func(ctx context.Context, lane int) (net.Conn, error) {
		c, vec, err := e.dialLane(ctx, addr, lane)
		vectored = vectored && vec
		return c, err
	})
	if err != nil {
		p.dialErr, p.dialAt = err, time.Now()
		return nil, err
	}
	tp.SetVectored(vectored)
	p.dialErr = nil
	p.p = tp
	return tp, nil
}

// tcpJob is one task cut into Config.SliceSize slices.
type tcpJob struct {
	peer *tcpPeer
	ops  []tcp.Op
	one  [1]tcp.Op // ops of a one-slice task, without a second allocation
	// vector: ops are scatter-gather slices (claimVector); sub holds their
	// plain pieces when the peer serves no scatter-gather requests.
	vector bool
	sub    []tcp.Op
	fans   []vecFanIn
}

func (j *tcpJob) slices() int { return len(j.ops) }
func (j *tcpJob) async() bool { return true }
func (j *tcpJob) drop()       {}

// run dials (if needed) and enqueues every slice; ctx carries the batch's
// deadline.
func (j *tcpJob) run(ctx context.Context, b *Batch, t *task) {
	p, err := j.peer.lanes(ctx)
	if j.vector {
		j.runVector(p, err, b, t)
		return
	}
	size := j.peer.e.cfg.SliceSize
	for s := range j.ops {
		op := &j.ops[s]
		off := s * size
		end := min(off+size, t.req.Length)
		*op = tcp.Op{Write: t.req.Op == OpWrite, Remote: t.req.Remote + uint64(off), Buf: t.local.B[off:end], Done: (*batchOps)(b), Tag: t.index, Grant: t.req.Grant}
		if err == nil {
			err = p.Enqueue(op)
		}
		if err != nil {
			b.sliceDone(t, err)
		}
	}
}

func (j *tcpJob) abort(err error) {
	for i := range j.ops {
		j.ops[i].FailLane(err)
	}
	for i := range j.sub {
		j.sub[i].FailLane(err)
	}
}

// batchOps is a Batch as the tcp transport's Completer: the method stays
// off Batch's public API.
type batchOps Batch

// OpDone implements tcp.Completer.
func (bo *batchOps) OpDone(op *tcp.Op, err error) {
	b := (*Batch)(bo)
	if err != nil && b.aborted.Load() {
		// Whatever broke the lane, this batch had already been aborted
		// (deadline, cancel, Free): report that.
		err = b.abortErr
	}
	if err != nil && !op.Write && op.Tries == 0 && b.retryable(err) && b.e.retry(b, op) {
		return
	}
	b.sliceDone(&b.tasks[op.Tag], err)
}

// retryable: the lane broke under a READ slice of a batch that is itself
// still live (another batch's deadline closed the lane, or the connection
// dropped). A READ has no effect at the peer, so it is sent once more on
// fresh lanes; a peer that really died then fails fast at the dial. WRITEs
// are not retried: the peer may still be applying the old lane's buffered
// bytes, which could land after a retried (and acknowledged) write.
func (b *Batch) retryable(err error) bool {
	if b.aborted.Load() || errors.Is(err, ErrClosed) {
		return false
	}
	return errors.Is(err, tcp.ErrPeerDown) || errors.Is(err, ErrTimeout)
}

// retry re-sends op on a (re)dialed peer from a goroutine of its own (the
// caller is a lane goroutine). It returns false when it will not retry.
func (e *Engine) retry(b *Batch, op *tcp.Op) bool {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed.Load() {
		return false
	}
	t := &b.tasks[op.Tag]
	j, ok := t.job.(*tcpJob)
	if !ok {
		return false
	}
	op.Tries++
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ctx, cancel := context.WithDeadline(context.Background(), b.deadline)
		p, err := j.peer.lanes(ctx)
		cancel()
		b.mu.Lock()
		if err == nil && b.aborted.Load() {
			err = b.abortErr
		}
		if err == nil {
			err = p.Enqueue(op)
		}
		b.mu.Unlock()
		if err != nil {
			b.sliceDone(t, err)
		}
	}()
	return true
}
