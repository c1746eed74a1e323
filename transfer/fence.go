package transfer

import (
	"context"
	"fmt"
	"net"
	"slices"
)

// inLane is an inbound data lane being served: the peer that opened it
// (wire.Lane.From, "" when it did not say) and done, closed once its
// serving goroutine stopped touching memory.
type inLane struct {
	from string
	done chan struct{}
}

func (e *Engine) laneIn(c net.Conn, from string) *inLane {
	in := &inLane{from: from, done: make(chan struct{})}
	e.connMu.Lock()
	e.lanes[c] = in
	e.connMu.Unlock()
	return in
}

func (e *Engine) laneOut(c net.Conn, in *inLane) {
	e.connMu.Lock()
	delete(e.lanes, c)
	e.connMu.Unlock()
	close(in.done)
}

// FenceFrom ends every data lane that the engines named by peers (segment
// names) opened to this engine, and every lane whose peer gave no name, and
// returns once the goroutines serving them have stopped: no byte those
// peers sent before the call is applied to this engine's memory after it
// returns (a payload a lane had already buffered may still land while it
// runs). It answers how many lanes it ended.
//
// A transfer that timed out or failed on the initiator's side may still
// have WRITE bytes on the way: in the initiator's socket (a lane closed
// gracefully keeps sending them; this package's lanes reset instead), in
// the network (a partitioned link retransmits them when it heals), or in
// this engine's socket buffer, not yet read. An owner that hands memory
// a failed write targeted to someone else (a decode engine reusing the
// blocks of a failed pull) fences the writer first; the peers' next
// transfers open new lanes. Lanes opened after the call are not touched.
//
// Ending a lane fails the peer's slices in flight on it (its WRITEs are
// not retried; READs are). The wait is bounded by ctx; on ctx's end the
// lanes are closed but may still be finishing a payload they had started:
// the error says so.
func (e *Engine) FenceFrom(ctx context.Context, peers ...string) (int, error) {
	var wait []*inLane
	e.connMu.Lock()
	for c, in := range e.lanes {
		if in.from == "" || slices.Contains(peers, in.from) {
			_ = c.Close()
			wait = append(wait, in)
		}
	}
	e.connMu.Unlock()
	for _, in := range wait {
		select {
		case <-in.done:
		case <-ctx.Done():
			return len(wait), fmt.Errorf("transfer: fence of %v: a lane still serving: %w", peers, ctx.Err())
		}
	}
	return len(wait), nil
}
