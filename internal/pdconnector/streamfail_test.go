package pdconnector

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/transfer"
)

// failNth is a transfer engine whose nth Transfer fails (the write of
// one layer broke: a peer that stopped answering, a deadline), after
// which it works again.
type failNth struct {
	Mover
	n, calls atomic.Int32
}

func (f *failNth) Transfer(ctx context.Context, reqs []transfer.Request) error {
	if f.calls.Add(1) == f.n.Load() {
		return transfer.ErrTimeout
	}
	return f.Mover.Transfer(ctx, reqs)
}

// TestStreamFailedLayerWriteAnswersFailed: when one layer's write of a
// stream fails, the pull is answered failed (never done with a layer
// missing), even though the other layers were written and the prefill
// finished; prefill frees its blocks.
func TestStreamFailedLayerWriteAnswersFailed(t *testing.T) {
	ln := listen(t)
	mv := &failNth{Mover: openTransfer(t)}
	mv.n.Store(2) // the second layer's write
	pre, err := New(Config{Role: RoleProducer, Transfer: mv, BootstrapAddr: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	running(t, pre, ln)
	dec, err := New(Config{Role: RoleConsumer, Transfer: openTransfer(t)})
	if err != nil {
		t.Fatal(err)
	}
	running(t, dec, nil)
	kvFor(t, pre, 1, 1)
	kvFor(t, dec, 100, 1)
	if testLayout.NumLayers < 2 {
		t.Fatalf("test layout has %d layers, want >= 2", testLayout.NumLayers)
	}
	pre.mu.Lock()
	pre.prod.Scheduled("xfer-f", "req-f", []int{0, 1, 2}, 0, 10, 10, pre.clock.Now())
	pre.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := pullAttached(t, ctx, pre, dec, "req-f", "xfer-f")
	pre.BindConnectorMeta(stepMeta{saves: []string{"xfer-f"}})
	for l := range testLayout.NumLayers {
		if err := pre.SaveKVLayer(ctx, l); err != nil {
			t.Fatal(err)
		}
		// One write per layer: wait for it before the next layer is done.
		waitfor.Cond(t, 10*time.Second, "layer write attempted", func() bool {
			return mv.calls.Load() >= int32(l+1) || pre.Stats().Pushing == 0
		})
	}
	pre.ClearConnectorMeta()
	pre.mu.Lock()
	pre.prod.Finished("xfer-f", "req-f", []int{0, 1, 2}, 10, true, pre.clock.Now())
	pre.mu.Unlock()
	var r pullResult
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("no answer")
	}
	if r.err == nil || r.resp.Status == bootstrap.StatusDone {
		t.Fatalf("a stream with a failed layer write answered %+v (err %v), want failed", r.resp, r.err)
	}
	if r.resp.Code != bootstrap.CodeTransfer {
		t.Fatalf("code %q, want %q", r.resp.Code, bootstrap.CodeTransfer)
	}
	if mv.calls.Load() != 2 {
		t.Fatalf("%d writes, want 2 (the stream stops at the failed one)", mv.calls.Load())
	}
	waitfor.Cond(t, 10*time.Second, "prefill freed the blocks", func() bool {
		s := pre.Stats()
		return s.Held == 0 && s.Pushing == 0
	})
}
