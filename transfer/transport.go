package transfer

import (
	"context"
	"fmt"
)

// transport is one way of reaching peers (tcp, shm, inproc). The engine
// holds its transports in order of preference (Engine.transports, built
// from Config.Transport); every opened segment holds one peer handle per
// transport, in the same order (segment.peers). A task goes to the first
// handle that claims it; TCP, when present, is last and claims everything.
type transport interface {
	// name is the transport's name as Batch.Transport reports it.
	name() string
	// newPeer makes this transport's handle on seg. It connects nothing:
	// handles connect on first use or in prepare.
	newPeer(seg *segment) peer
}

// peer is one transport's handle on one peer segment.
type peer interface {
	// prepare makes the handle ready to move data (dials lanes, maps the
	// peer's shareable buffers). all reports that this transport serves
	// every buffer the peer lists, so later transports need no preparing.
	prepare(ctx context.Context) (all bool, err error)
	// claim returns the job that moves t's bytes, or nil when this
	// transport cannot serve t (the next transport is asked). What claim
	// reserves (a mapped span) is released by the job's run or drop.
	claim(ctx context.Context, t *task) job
	// close fails what is in flight with err and waits for the handle's
	// goroutines. The engine calls it once, from Close.
	close(err error)
}

// job moves one task's bytes.
type job interface {
	// slices is how many completions the job reports (Batch.sliceDone).
	slices() int
	// async: run only starts the work and returns, completions come from
	// other goroutines (TCP lanes); run is called with Batch.mu held. A
	// synchronous job (a memcpy) runs on the batch's copy goroutine.
	async() bool
	// run moves the bytes (or starts to), reporting every slice.
	run(ctx context.Context, b *Batch, t *task)
	// abort fails the job's slices still in flight; Batch.mu is held.
	abort(err error)
	// drop releases what claim reserved, for a job that will not run.
	drop()
}

// newTransports builds the engine's transports, most preferred first.
func (e *Engine) newTransports() []transport {
	switch e.cfg.Transport {
	case TransportInproc:
		return []transport{&inprocTransport{hub: e.cfg.InprocHub.h}}
	case TransportTCP:
		return []transport{&tcpTransport{e: e}}
	}
	// auto and shm: shared memory for same-host managed buffers, TCP for
	// the rest.
	return []transport{&shmTransport{e: e}, &tcpTransport{e: e}}
}

// newSegment makes a segment with one (unconnected) handle per transport.
func (e *Engine) newSegment(name string) *segment {
	seg := &segment{name: name}
	seg.peers = make([]peer, len(e.transports))
	for i, tr := range e.transports {
		seg.peers[i] = tr.newPeer(seg)
	}
	return seg
}

// pickTransport gives t to the first transport whose handle claims it.
func (e *Engine) pickTransport(ctx context.Context, t *task) {
	if t.vec == nil && e.pickDevice(t) {
		return
	}
	for i, p := range t.seg.peers {
		if j := p.claim(ctx, t); j != nil {
			t.transport = e.transports[i].name()
			t.job = j
			return
		}
	}
	// Unreachable while TCP or inproc (which claim everything) is last.
	t.transport = e.transports[len(e.transports)-1].name()
	t.job = failedJob{err: fmt.Errorf("transfer: %w: no transport serves segment %q", ErrPeerDown, t.seg.name)}
}

// PreparePeer makes the engine ready to move data to and from the peer
// segment (by name): it opens the segment, or refetches its descriptor when
// it was already open (so buffers the peer registered since are known),
// maps the peer's shareable buffers when shared memory can reach it, and
// dials TCP lanes for what shared memory does not cover. It is an
// optimisation: transfers do all of this on first use anyway. A peer that
// registers more memory later is handled by the transfers themselves (they
// refetch the descriptor when a request names memory it does not list).
// Errors wrap ErrUnknownSegment (the peer cannot be opened), ErrClosed,
// ErrAuth or ErrPeerDown.
func (e *Engine) PreparePeer(ctx context.Context, segment string) error {
	e.segMu.Lock()
	_, known := e.segByName[segment]
	e.segMu.Unlock()
	id, err := e.OpenSegment(ctx, segment)
	if err != nil {
		return err
	}
	seg := e.segment(id)
	if seg == nil {
		return fmt.Errorf("transfer: prepare %q: %w", segment, ErrClosed)
	}
	if known {
		if err := e.refresh(ctx, seg); err != nil {
			return err
		}
	}
	for _, p := range seg.peers {
		all, err := p.prepare(ctx)
		if err != nil {
			return fmt.Errorf("transfer: prepare %q: %w", segment, mapErr(err))
		}
		if all {
			break
		}
	}
	return nil
}

// failedJob fails its task at once.
type failedJob struct{ err error }

func (j failedJob) slices() int                              { return 1 }
func (j failedJob) async() bool                              { return false }
func (j failedJob) run(_ context.Context, b *Batch, t *task) { b.sliceDone(t, j.err) }
func (j failedJob) abort(error)                              {}
func (j failedJob) drop()                                    {}
