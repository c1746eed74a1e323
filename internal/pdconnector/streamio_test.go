package pdconnector

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// TestStreamBetweenConnectors: decode's pull attaches while the prefill
// computes; the producer's SaveKVLayer hook makes each layer's complete
// blocks go out at once (one write per layer and step), the last partial
// block with the step that ends the prompt; the answer comes after the
// prefill finished, with every byte in place.
func TestStreamBetweenConnectors(t *testing.T) {
	ln := listen(t)
	pre, err := New(Config{Role: RoleProducer, Transfer: openTransfer(t), BootstrapAddr: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	running(t, pre, ln)
	dec, err := New(Config{Role: RoleConsumer, Transfer: openTransfer(t)})
	if err != nil {
		t.Fatal(err)
	}
	running(t, dec, nil)
	src := kvFor(t, pre, 1, 1)
	dst := kvFor(t, dec, 100, 1)

	// Step 1 computes tokens [0, 8) of a 10-token prompt in blocks 0, 1, 2.
	pre.mu.Lock()
	pre.prod.Scheduled("xfer-s", "req-s", []int{0, 1, 2}, 0, 8, 10, pre.clock.Now())
	pre.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := pullAttached(t, ctx, pre, dec, "req-s", "xfer-s")
	bb := testLayout.BlockBytes()
	pre.BindConnectorMeta(stepMeta{saves: []string{"xfer-s"}})
	for l := range testLayout.NumLayers {
		if err := pre.SaveKVLayer(ctx, l); err != nil {
			t.Fatal(err)
		}
		waitfor.Cond(t, 10*time.Second, "layer written", func() bool { return bytes.Equal(dst.Ranks[0][l][5*bb:7*bb], src.Ranks[0][l][0:2*bb]) })
	}
	if bytes.Equal(dst.Ranks[0][0][7*bb:8*bb], src.Ranks[0][0][2*bb:3*bb]) {
		t.Fatal("the partial block was sent before the prompt was complete")
	}
	// Step 2: tokens [8, 10), the end of the prompt; then the request finishes.
	pre.mu.Lock()
	pre.prod.Scheduled("xfer-s", "req-s", []int{0, 1, 2}, 8, 10, 10, pre.clock.Now())
	pre.mu.Unlock()
	for l := range testLayout.NumLayers {
		_ = pre.SaveKVLayer(ctx, l)
	}
	pre.ClearConnectorMeta()
	select {
	case r := <-done:
		t.Fatalf("answered before the prefill finished: %+v %v", r.resp, r.err)
	default:
	}
	pre.mu.Lock()
	pre.prod.Finished("xfer-s", "req-s", []int{0, 1, 2}, 10, true, pre.clock.Now())
	pre.mu.Unlock()
	r := <-done
	if r.err != nil || !r.resp.Layerwise || r.resp.Requests != 2*testLayout.NumLayers || r.resp.Bytes != int64(3*bb*testLayout.NumLayers) {
		t.Fatalf("pull: %+v %v (want layer-wise, 2 writes per layer)", r.resp, r.err)
	}
	for l := range src.Ranks[0] {
		if !bytes.Equal(dst.Ranks[0][l][5*bb:8*bb], src.Ranks[0][l][0:3*bb]) {
			t.Fatalf("layer %d differs", l)
		}
	}
	if s := pre.Stats(); s.Held != 0 || s.Pushing != 0 || s.FreedDone != 1 || s.StreamWrites == 0 {
		t.Fatalf("prefill %+v", s)
	}
	if got := pre.prod.DrainDoneSending(); len(got) != 1 {
		t.Fatalf("done sending %v", got)
	}
}

// A decode that asks for fewer blocks than the prompt has gets
// bad_request, not done with blocks missing.
func TestStreamBadBlockRange(t *testing.T) {
	ln := listen(t)
	pre, err := New(Config{Role: RoleProducer, Transfer: openTransfer(t), BootstrapAddr: ln.Addr().String()})
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
	kvFor(t, dec, 2, 1)
	pre.mu.Lock()
	pre.prod.Finished("xfer-b", "req-b", []int{0, 1, 2}, 10, true, pre.clock.Now())
	pre.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	resp, err := dec.pull(ctx, PullSpec{ReqID: "req-b", TransferID: "xfer-b", Bootstrap: pre.BootstrapAddr(),
		EngineID: pre.EngineID(), NumTokens: 10, FirstBlock: 0, BlockIDs: []int{5, 6}})
	if err == nil || resp.Code != bootstrap.CodeBadRequest {
		t.Fatalf("pull of 2 of 3 blocks: %+v %v", resp, err)
	}
	if s := pre.Stats(); s.Held != 0 || s.FreedDone != 1 {
		t.Fatalf("prefill %+v", s)
	}
}

// pullResult is how a background pull ended.
type pullResult struct {
	resp bootstrap.PullResponse
	err  error
}

// pullAttached starts dec's pull of transfer tid (a 10-token prompt,
// decode blocks 5-7) from pre in the background and returns once prefill
// has attached it to its stream; the channel gets the pull's outcome.
func pullAttached(t *testing.T, ctx context.Context, pre, dec *Connector, req, tid string) <-chan pullResult {
	t.Helper()
	done := make(chan pullResult, 1)
	go func() {
		r, err := dec.pull(ctx, PullSpec{ReqID: req, TransferID: tid, Bootstrap: pre.BootstrapAddr(),
			EngineID: pre.EngineID(), NumTokens: 10, FirstBlock: 0, BlockIDs: []int{5, 6, 7}})
		done <- pullResult{r, err}
	}()
	waitfor.Cond(t, 10*time.Second, "the pull attached", func() bool { return pre.Stats().Pushing == 1 })
	return done
}
