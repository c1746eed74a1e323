package transfer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
	// Grant is an encoded grant (package internal/grant) covering the
	// remote extent, for a peer that checks grants (Config.Grants); ""
	// otherwise. Requests that share one grant should share the string
	// (not copies of it): a lane sends a grant once and then recognises
	// it by its data pointer.
	Grant string
	// Extents, when set, makes the request scatter-gather: it moves every
	// extent (Local, Remote and Length of the Request are then unused:
	// Local and Remote must be 0, Length 0 or the extents' total) as ONE
	// request: one task, one status, one round trip per TCP slice (the
	// peer's lane checks every extent against its registered memory and
	// rejects the whole request if one lies outside), one memcpy per
	// extent over shared memory. Destination ranges (remote for a WRITE,
	// local for a READ) must not overlap; extents adjacent on both sides
	// are merged. Local memory must be host memory. Coalesce builds them
	// from plain requests.
	Extents []Extent
}

// Batch is a submitted set of requests. Poll it with Status or block with
// Wait; Free it when done.
type Batch struct {
	e     *Engine
	tasks []task
	left  atomic.Int64
	done  chan struct{}
	timer atomic.Pointer[time.Timer]

	mu       sync.Mutex // guards abort vs. enqueue
	aborted  atomic.Bool
	abortErr error
	deadline time.Time
	inlined  bool // every request ran on the submitting goroutine before submit returned (start)
}

type task struct {
	index     int
	req       Request
	local     registry.Span
	seg       *segment
	vec       []vext          // a scatter-gather request's extents (nil otherwise)
	spans     []registry.Span // their local pins when not all in local
	transport string          // the name of the transport that serves it
	job       job             // how its bytes move (made by the transport's peer handle)
	slices    atomic.Int32
	state     atomic.Int32
	err       atomic.Pointer[error]
}

// Submit starts the requests and returns at once. Malformed requests (zero
// length, unknown segment, local memory not registered) fail the whole
// Submit. The batch's deadline is ctx's deadline, or Config.Timeout plus
// 1 ns per byte from now.
//
// It runs in phases: check the requests and pin their local memory
// (newBatch), give each task to a transport (route), fix the deadline,
// start the transports' jobs (start), and arm the deadline's timer (arm).
func (e *Engine) Submit(ctx context.Context, reqs []Request) (*Batch, error) {
	return e.submit(ctx, time.Time{}, reqs, false)
}

// inlineMax is the most bytes of local copies (shared memory, in process)
// Transfer runs on the caller's goroutine before the batch's deadline
// timer is armed: the caller waits anyway, and a small copy costs less
// than handing it to another goroutine (a 4 KiB store put or get spent
// ~10 us in that hand-off on a loaded machine) or arming a timer. Larger
// local copies of a Transfer run on the caller's goroutine too, after the
// timer is armed (which aborts them between one copy and the next): a
// hand-off to another goroutine makes the copy wait for a free P, which
// on a machine whose Ps all compute (a prefill streaming its KV layer by
// layer) costs more than the copy.
const inlineMax = 64 << 10

// submit is Submit; inline runs small local copies before returning. A
// non-zero until is a deadline sooner than ctx's (TransferUntil).
func (e *Engine) submit(ctx context.Context, until time.Time, reqs []Request, inline bool) (*Batch, error) {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed.Load() {
		return nil, fmt.Errorf("transfer: submit: %w", ErrClosed)
	}
	b, err := e.newBatch(reqs)
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		close(b.done)
		return b, nil
	}
	e.route(ctx, b)
	b.deadline = e.deadline(ctx, reqs)
	if !until.IsZero() && until.Before(b.deadline) {
		b.deadline = until
	}
	late := b.start(ctx, inline)
	b.arm()
	if late != nil {
		b.runLocal(ctx, late)
	}
	return b, nil
}

// newBatch checks every request and pins its local memory; on error
// nothing stays pinned.
func (e *Engine) newBatch(reqs []Request) (*Batch, error) {
	b := e.reusedBatch(len(reqs))
	if b == nil {
		b = &Batch{e: e, tasks: make([]task, len(reqs))}
	}
	b.done = make(chan struct{})
	for i, r := range reqs {
		t := &b.tasks[i]
		t.index, t.req = i, r
		err := e.checkRequest(t)
		if err != nil {
			for k := range i {
				b.tasks[k].releaseLocal()
			}
			return nil, fmt.Errorf("transfer: request %d: %w", i, err)
		}
	}
	b.left.Store(int64(len(reqs)))
	return b, nil
}

// checkRequest validates t's request and pins its local memory.
func (e *Engine) checkRequest(t *task) error {
	r := t.req
	if r.Op != OpRead && r.Op != OpWrite {
		return fmt.Errorf("%w: opcode %d", ErrInvalid, r.Op)
	}
	if r.Extents == nil && r.Length <= 0 {
		return fmt.Errorf("%w: length %d", ErrInvalid, r.Length)
	}
	t.seg = e.segment(r.Segment)
	if t.seg == nil {
		return fmt.Errorf("%w: segment id %d not opened", ErrUnknownSegment, r.Segment)
	}
	if r.Extents != nil {
		return e.checkVector(t)
	}
	sp, err := e.reg.AcquireAny(uint64(r.Local), uint64(r.Length))
	if err != nil {
		return fmt.Errorf("local %#x+%d: %w: %w", r.Local, r.Length, ErrNotRegistered, err)
	}
	t.local = sp
	return nil
}

// route gives every task to a transport (pickTransport).
func (e *Engine) route(ctx context.Context, b *Batch) {
	for i := range b.tasks {
		t := &b.tasks[i]
		e.pickTransport(ctx, t)
		t.slices.Store(int32(t.job.slices()))
		t.state.Store(int32(StatusPending))
	}
}

// deadline is ctx's deadline, or Config.Timeout plus (like Mooncake) about
// 1 ns per byte from now.
func (e *Engine) deadline(ctx context.Context, reqs []Request) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	var total int64
	for _, r := range reqs {
		if r.Extents == nil {
			total += int64(r.Length)
		}
		for _, x := range r.Extents {
			total += int64(x.Length)
		}
	}
	return time.Now().Add(e.cfg.Timeout + time.Duration(total))
}

// start starts the asynchronous jobs (TCP lanes) here, under b.mu so that
// an abort sees every slice enqueued, and hands the synchronous ones
// (memcpy) to one goroutine of the batch; when inline it runs them here if
// they total at most inlineMax bytes, else returns them for the caller to
// run once the deadline's timer is armed.
func (b *Batch) start(ctx context.Context, inline bool) (late []int) {
	var dctx context.Context // made for the first asynchronous job: a batch of local copies needs no timer
	var local []int
	b.mu.Lock()
	for i := range b.tasks {
		t := &b.tasks[i]
		if !t.job.async() {
			local = append(local, i)
			continue
		}
		if dctx == nil {
			var cancel context.CancelFunc
			dctx, cancel = context.WithDeadline(ctx, b.deadline)
			defer cancel()
		}
		t.job.run(dctx, b, t)
	}
	b.mu.Unlock()
	if len(local) == 0 {
		return nil
	}
	n := 0
	for _, i := range local {
		n += b.tasks[i].bytes()
	}
	b.e.wg.Add(1)
	switch {
	case inline && n <= inlineMax:
		b.runLocal(context.Background(), local)
		b.inlined = dctx == nil // no asynchronous job holds the batch
		return nil
	case inline:
		return local
	}
	go b.runLocal(context.Background(), local)
	return nil
}

// bytes is the number of bytes t moves.
func (t *task) bytes() int {
	if t.vec == nil {
		return t.req.Length
	}
	n := 0
	for _, x := range t.vec {
		n += len(x.b)
	}
	return n
}

// arm starts the deadline's timer (unless everything already ended).
func (b *Batch) arm() {
	select {
	case <-b.done:
		return
	default:
	}
	tm := time.AfterFunc(time.Until(b.deadline), func() {
		b.abort(fmt.Errorf("transfer: deadline %s passed: %w", b.deadline.Format(time.RFC3339Nano), ErrTimeout))
	})
	b.timer.Store(tm)
	select {
	case <-b.done:
		tm.Stop()
	default:
	}
}

// runLocal runs the synchronous jobs (in-process and shared-memory copies)
// one after the other, skipping those not started when the batch aborts.
// They are plain copies: the batch's deadline reaches them through abort
// (arm's timer), and the end of ctx (the caller's, when run on its
// goroutine) aborts the batch, between one job and the next.
func (b *Batch) runLocal(ctx context.Context, idx []int) {
	defer b.e.wg.Done()
	for _, i := range idx {
		t := &b.tasks[i]
		if err := ctx.Err(); err != nil && !b.aborted.Load() {
			kind := ErrCanceled
			if errors.Is(err, context.DeadlineExceeded) {
				kind = ErrTimeout
			}
			b.abort(fmt.Errorf("transfer: %w: %w", kind, err))
		}
		if b.aborted.Load() {
			b.mu.Lock()
			err := b.abortErr
			b.mu.Unlock()
			t.job.drop()
			b.sliceDone(t, err)
			continue
		}
		t.job.run(context.Background(), b, t)
	}
}

func (b *Batch) sliceDone(t *task, err error) {
	if err != nil {
		// Only this branch takes an address, so a nil err costs no
		// allocation per slice.
		e := mapErr(err)
		t.err.CompareAndSwap(nil, &e)
	}
	if t.slices.Add(-1) != 0 {
		return
	}
	t.releaseLocal()
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
		errors.Is(err, ErrOutOfBounds), errors.Is(err, ErrPeerDown), errors.Is(err, ErrAuth),
		errors.Is(err, ErrDenied):
		return err
	case errors.Is(err, tcp.ErrRejected), errors.Is(err, registry.ErrOutOfBounds), errors.Is(err, registry.ErrNotRegistered):
		return fmt.Errorf("%w: %w", ErrOutOfBounds, err)
	case errors.Is(err, tcp.ErrDenied):
		return fmt.Errorf("%w: %w", ErrDenied, err)
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
	for i := range b.tasks {
		t := &b.tasks[i]
		if t.job != nil && t.slices.Load() > 0 {
			t.job.abort(err)
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

// Transfer is Submit + Wait + Free. Small local copies (shared memory, in
// process) run on the caller's goroutine.
func (e *Engine) Transfer(ctx context.Context, reqs []Request) error {
	return e.TransferUntil(ctx, time.Time{}, reqs)
}

// TransferUntil is Transfer with a deadline of its own (zero: none) on top
// of ctx's: the batch fails with ErrTimeout when it passes. Unlike a
// context.WithDeadline made for the call, it costs no timer when the
// copies run inline (small local copies, which end before it returns);
// other batches arm the engine's own deadline timer, as with ctx's.
func (e *Engine) TransferUntil(ctx context.Context, deadline time.Time, reqs []Request) error {
	b, err := e.submit(ctx, deadline, reqs, true)
	if err != nil {
		return err
	}
	err = b.Wait(ctx)
	b.Free()
	e.recycle(b)
	return err
}

// batchPool recycles the batches of TransferUntil whose requests all ran
// inline (small local copies: a store's small put or get): nothing else
// holds them once they ended, and a batch and its tasks were most of the
// garbage of such a call.
var batchPool sync.Pool

// maxPooledTasks bounds the task list a pooled batch keeps.
const maxPooledTasks = 16

// recycle gives b, ended and freed by TransferUntil, to batchPool when
// every request ran inline (Batch.inlined).
func (e *Engine) recycle(b *Batch) {
	if !b.inlined || cap(b.tasks) > maxPooledTasks || b.timer.Load() != nil {
		return
	}
	tasks := b.tasks[:cap(b.tasks)]
	clear(tasks) // no requests, pins or jobs kept alive in the pool
	*b = Batch{tasks: tasks[:0]}
	batchPool.Put(b)
}

// reusedBatch is a batch of e with n zeroed tasks from batchPool, nil when
// the pool has none that fits.
func (e *Engine) reusedBatch(n int) *Batch {
	if n > maxPooledTasks {
		return nil
	}
	b, _ := batchPool.Get().(*Batch)
	if b == nil {
		return nil
	}
	if cap(b.tasks) < n {
		b.tasks = make([]task, n)
	}
	b.e, b.tasks = e, b.tasks[:n]
	return b
}

func opName(op Opcode) string {
	if op == OpWrite {
		return "write"
	}
	return "read"
}
