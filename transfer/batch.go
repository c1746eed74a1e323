package transfer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcache-go/mooncake/internal/transport/inproc"
	"github.com/kvcache-go/mooncake/internal/transport/registry"
	"github.com/kvcache-go/mooncake/internal/transport/tcp"
)

// TaskStatus is the state of one request of a batch (Mooncake's numbering).
type TaskStatus int

// Task states.
const (
	StatusWaiting TaskStatus = iota
	StatusPending
	StatusInvalid
	StatusCanceled
	StatusCompleted
	StatusTimeout
	StatusFailed
)

func (s TaskStatus) String() string {
	switch s {
	case StatusWaiting:
		return "waiting"
	case StatusPending:
		return "pending"
	case StatusInvalid:
		return "invalid"
	case StatusCanceled:
		return "canceled"
	case StatusCompleted:
		return "completed"
	case StatusTimeout:
		return "timeout"
	case StatusFailed:
		return "failed"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Request is one READ or WRITE between local registered memory and ONE
// buffer registered by the peer.
type Request struct {
	Op      Opcode
	Local   uintptr // address inside a locally registered buffer
	Segment SegmentID
	Remote  uint64 // address inside ONE buffer registered by the peer
	Length  int
}

// Batch is a submitted set of requests. Poll it with Status or block with
// Wait; Free it when done.
type Batch struct {
	e     *Engine
	tasks []task
	ops   []tcp.Op
	left  atomic.Int64
	done  chan struct{}
	timer atomic.Pointer[time.Timer]

	mu       sync.Mutex // guards abort vs. enqueue
	aborted  atomic.Bool
	abortErr error
	deadline time.Time
}

type task struct {
	req       Request
	local     registry.Span
	seg       *segment
	transport string
	slices    atomic.Int32
	state     atomic.Int32
	err       atomic.Pointer[error]
	shm       *shmTarget
}

// Submit starts the requests and returns at once. Malformed requests (zero
// length, unknown segment, local memory not registered) fail the whole
// Submit. The batch's deadline is ctx's deadline, or Config.Timeout plus
// 1 ns per byte from now.
func (e *Engine) Submit(ctx context.Context, reqs []Request) (*Batch, error) {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed.Load() {
		return nil, fmt.Errorf("transfer: submit: %w", ErrClosed)
	}
	b := &Batch{e: e, tasks: make([]task, len(reqs)), done: make(chan struct{})}
	nslices := 0
	release := func(n int) {
		for i := range n {
			b.tasks[i].local.Release()
			if b.tasks[i].shm != nil {
				b.tasks[i].shm.release()
			}
		}
	}
	for i, r := range reqs {
		t := &b.tasks[i]
		t.req = r
		if r.Op != OpRead && r.Op != OpWrite {
			release(i)
			return nil, fmt.Errorf("transfer: request %d: %w: opcode %d", i, ErrInvalid, r.Op)
		}
		if r.Length <= 0 {
			release(i)
			return nil, fmt.Errorf("transfer: request %d: %w: length %d", i, ErrInvalid, r.Length)
		}
		t.seg = e.segment(r.Segment)
		if t.seg == nil {
			release(i)
			return nil, fmt.Errorf("transfer: request %d: %w: segment id %d not opened", i, ErrUnknownSegment, r.Segment)
		}
		sp, err := e.reg.Acquire(uint64(r.Local), uint64(r.Length))
		if err != nil {
			release(i)
			return nil, fmt.Errorf("transfer: request %d: local %#x+%d: %w: %w", i, r.Local, r.Length, ErrNotRegistered, err)
		}
		t.local = sp
		t.transport = e.pickTransport(t)
		t.state.Store(int32(StatusPending))
		if t.transport == TransportTCP {
			n := (r.Length + e.cfg.SliceSize - 1) / e.cfg.SliceSize
			t.slices.Store(int32(n))
			nslices += n
		} else {
			t.slices.Store(1)
		}
	}
	b.left.Store(int64(len(reqs)))
	if len(reqs) == 0 {
		close(b.done)
		return b, nil
	}
	// Like Mooncake: the default deadline grows by ~1 ns per byte.
	var total int64
	for _, r := range reqs {
		total += int64(r.Length)
	}
	deadline := time.Now().Add(e.cfg.Timeout + time.Duration(total))
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	b.deadline = deadline
	b.ops = make([]tcp.Op, nslices)

	b.mu.Lock()
	oi := 0
	var local []int
	peers := map[*segment]*tcp.Peer{}
	peerErr := map[*segment]error{}
	for i := range b.tasks {
		t := &b.tasks[i]
		if t.transport != TransportTCP {
			local = append(local, i)
			continue
		}
		p, ok := peers[t.seg]
		err := peerErr[t.seg]
		if !ok && err == nil {
			dctx, cancel := context.WithDeadline(ctx, deadline)
			p, err = e.tcpPeer(dctx, t.seg)
			cancel()
			if err != nil {
				peerErr[t.seg] = err
			} else {
				peers[t.seg] = p
			}
		}
		n := int(t.slices.Load())
		for s := range n {
			op := &b.ops[oi]
			oi++
			off := s * e.cfg.SliceSize
			end := min(off+e.cfg.SliceSize, t.req.Length)
			*op = tcp.Op{Write: t.req.Op == OpWrite, Remote: t.req.Remote + uint64(off), Buf: t.local.B[off:end], Done: b, Tag: i}
			if err == nil {
				err = p.Enqueue(op)
			}
			if err != nil {
				b.sliceDone(t, err)
			}
		}
	}
	b.mu.Unlock()
	if len(local) > 0 {
		e.wg.Add(1)
		go b.runLocal(local)
	}
	tm := time.AfterFunc(time.Until(deadline), func() {
		b.abort(fmt.Errorf("transfer: deadline %s passed: %w", deadline.Format(time.RFC3339Nano), ErrTimeout))
	})
	b.timer.Store(tm)
	select {
	case <-b.done:
		tm.Stop()
	default:
	}
	return b, nil
}

// pickTransport chooses how to serve a task.
func (e *Engine) pickTransport(t *task) string {
	switch e.cfg.Transport {
	case TransportInproc:
		return TransportInproc
	case TransportTCP:
		return TransportTCP
	}
	st, unknown := e.shmTargetFor(t.seg, t.req.Remote, uint64(t.req.Length))
	if st == nil && unknown && t.seg.descStale() {
		// The range is in no buffer we know of: the peer may have
		// allocated managed memory since we fetched its descriptor.
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.HandshakeTimeout)
		if e.refresh(ctx, t.seg) == nil {
			st, _ = e.shmTargetFor(t.seg, t.req.Remote, uint64(t.req.Length))
		}
		cancel()
	}
	if st != nil {
		t.shm = st
		return TransportShm
	}
	return TransportTCP
}

// runLocal serves the in-process and shared-memory tasks: one copy each.
func (b *Batch) runLocal(idx []int) {
	defer b.e.wg.Done()
	for _, i := range idx {
		t := &b.tasks[i]
		if b.aborted.Load() {
			b.mu.Lock()
			err := b.abortErr
			b.mu.Unlock()
			if t.shm != nil {
				t.shm.release()
			}
			b.sliceDone(t, err)
			continue
		}
		var err error
		switch t.transport {
		case TransportInproc:
			t.seg.mu.Lock()
			mem := t.seg.mem
			t.seg.mu.Unlock()
			err = inproc.Copy(mem, t.req.Op == OpWrite, t.local.B, t.req.Remote)
		case TransportShm:
			err = t.shm.copy(t.req.Op == OpWrite, t.local.B, t.req.Remote)
		}
		b.sliceDone(t, err)
	}
}

// OpDone implements tcp.Completer.
func (b *Batch) OpDone(op *tcp.Op, err error) {
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
	op.Tries++
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := &b.tasks[op.Tag]
		ctx, cancel := context.WithDeadline(context.Background(), b.deadline)
		p, err := e.tcpPeer(ctx, t.seg)
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

func (b *Batch) sliceDone(t *task, err error) {
	if err != nil {
		err = mapErr(err)
		t.err.CompareAndSwap(nil, &err)
	}
	if t.slices.Add(-1) != 0 {
		return
	}
	t.local.Release()
	st := StatusCompleted
	if ep := t.err.Load(); ep != nil {
		switch {
		case errors.Is(*ep, ErrTimeout):
			st = StatusTimeout
		case errors.Is(*ep, ErrCanceled):
			st = StatusCanceled
		default:
			st = StatusFailed
		}
	}
	t.state.Store(int32(st))
	if b.left.Add(-1) == 0 {
		close(b.done)
		if tm := b.timer.Load(); tm != nil {
			tm.Stop()
		}
	}
}

func mapErr(err error) error {
	switch {
	case errors.Is(err, ErrTimeout), errors.Is(err, ErrClosed), errors.Is(err, ErrCanceled),
		errors.Is(err, ErrOutOfBounds), errors.Is(err, ErrPeerDown), errors.Is(err, ErrAuth):
		return err
	case errors.Is(err, tcp.ErrRejected), errors.Is(err, registry.ErrOutOfBounds), errors.Is(err, registry.ErrNotRegistered):
		return fmt.Errorf("%w: %w", ErrOutOfBounds, err)
	case errors.Is(err, tcp.ErrChecksum):
		return fmt.Errorf("%w: %w", ErrChecksum, err)
	case errors.Is(err, tcp.ErrPeerDown), errors.Is(err, tcp.ErrProtocol):
		return fmt.Errorf("%w: %w", ErrPeerDown, err)
	}
	return err
}

// abort ends the batch early: lanes still carrying its slices are closed
// (their other slices fail too), local copies not yet started are skipped.
func (b *Batch) abort(err error) {
	select {
	case <-b.done:
		return
	default:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.aborted.Load() {
		return
	}
	b.abortErr = err
	b.aborted.Store(true)
	for i := range b.ops {
		op := &b.ops[i]
		if b.tasks[op.Tag].slices.Load() > 0 {
			op.FailLane(err)
		}
	}
}

// Wait blocks until every request has ended and returns the first failure
// (nil if all completed). If ctx ends first, the batch is aborted and Wait
// still returns only after the engine has stopped touching its memory.
func (b *Batch) Wait(ctx context.Context) error {
	select {
	case <-b.done:
	case <-ctx.Done():
		err := ErrCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = ErrTimeout
		}
		b.abort(fmt.Errorf("transfer: wait: %w: %w", err, ctx.Err()))
		<-b.done
	}
	for i := range b.tasks {
		if ep := b.tasks[i].err.Load(); ep != nil {
			return fmt.Errorf("transfer: request %d (%s %d bytes): %w", i, opName(b.tasks[i].req.Op), b.tasks[i].req.Length, *ep)
		}
	}
	return nil
}

// Done is closed when every request has ended.
func (b *Batch) Done() <-chan struct{} { return b.done }

// Len is the number of requests.
func (b *Batch) Len() int { return len(b.tasks) }

// Status is request i's state.
func (b *Batch) Status(i int) TaskStatus { return TaskStatus(b.tasks[i].state.Load()) }

// Err is request i's error (nil while pending or when completed).
func (b *Batch) Err(i int) error {
	if ep := b.tasks[i].err.Load(); ep != nil && b.Status(i) != StatusPending {
		return *ep
	}
	return nil
}

// Transport says which transport served request i: "tcp", "shm" or "inproc".
func (b *Batch) Transport(i int) string { return b.tasks[i].transport }

// Free releases the batch. A batch still running is canceled first.
func (b *Batch) Free() {
	select {
	case <-b.done:
	default:
		b.abort(fmt.Errorf("transfer: batch freed: %w", ErrCanceled))
		<-b.done
	}
	if tm := b.timer.Load(); tm != nil {
		tm.Stop()
	}
}

// Transfer is Submit + Wait + Free.
func (e *Engine) Transfer(ctx context.Context, reqs []Request) error {
	b, err := e.Submit(ctx, reqs)
	if err != nil {
		return err
	}
	err = b.Wait(ctx)
	b.Free()
	return err
}

func opName(op Opcode) string {
	if op == OpWrite {
		return "write"
	}
	return "read"
}
