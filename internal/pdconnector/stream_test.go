package pdconnector

import (
	"reflect"
	"testing"
	"time"
)

// streamCore is a core streaming 3 layers of 4-token blocks.
func streamCore() *ProducerCore {
	p := NewProducerCore(time.Minute)
	p.EnableStreaming(3, 4)
	return p
}

func next(t *testing.T, p *ProducerCore, tid string, want StreamState) []LayerWrite {
	t.Helper()
	st, w := p.Next(tid)
	if st != want {
		t.Fatalf("Next = %v %v, want %v", st, w, want)
	}
	return w
}

func lw(layer int, src, dst []int) LayerWrite { return LayerWrite{Layer: layer, Src: src, Dst: dst} }

// A prompt of 18 tokens (5 blocks) prefilled in two chunks, the pull
// attached before the first layer: each layer's complete blocks are queued
// in layer order as each layer finishes; the last, partial block only with
// the chunk that completes the prompt; done once the prefill finished.
func TestStreamLayerOrder(t *testing.T) {
	p := streamCore()
	table := []int{10, 11, 12, 13, 14}
	p.Scheduled("x", "r", table, 0, 10, 18, t0)
	if st, ch := p.Attach("x", 0, []int{20, 21, 22, 23, 24}, 18, t0); st != PullReady || ch == nil {
		t.Fatalf("Attach = %v", st)
	}
	next(t, p, "x", StreamIdle)
	if !p.LayerDone("x", 0) {
		t.Fatal("layer 0 queued nothing")
	}
	w := next(t, p, "x", StreamWrite)
	if want := []LayerWrite{lw(0, []int{10, 11}, []int{20, 21})}; !reflect.DeepEqual(w, want) {
		t.Fatalf("layer 0 of chunk 1 = %v, want %v (tokens 0..9: blocks 0 and 1 complete, block 2 partial)", w, want)
	}
	p.LayerDone("x", 1)
	p.LayerDone("x", 2)
	w = next(t, p, "x", StreamWrite)
	if want := []LayerWrite{lw(1, []int{10, 11}, []int{20, 21}), lw(2, []int{10, 11}, []int{20, 21})}; !reflect.DeepEqual(w, want) {
		t.Fatalf("layers 1, 2 = %v, want %v", w, want)
	}
	next(t, p, "x", StreamIdle)
	// Chunk 2: tokens 10..17, the end of the prompt.
	p.Scheduled("x", "r", table, 10, 18, 18, t0)
	for l := range 3 {
		p.LayerDone("x", l)
		w = next(t, p, "x", StreamWrite)
		if want := []LayerWrite{lw(l, []int{12, 13, 14}, []int{22, 23, 24})}; !reflect.DeepEqual(w, want) {
			t.Fatalf("layer %d of chunk 2 = %v, want %v", l, w, want)
		}
	}
	next(t, p, "x", StreamIdle) // everything sent, prefill not finished
	if !p.Finished("x", "r", table, 18, true, t0) {
		t.Fatal("streamed prefill not delay-freed")
	}
	next(t, p, "x", StreamDone)
	if pl, dt, at := p.StreamInfo("x"); pl != 18 || dt != 18 || !at.Equal(t0) {
		t.Fatalf("StreamInfo = %d %d %v", pl, dt, at)
	}
	if d := p.DrainDoneSending(); len(d) != 0 {
		t.Fatalf("freed before PushDone: %v", d)
	}
	p.PushDone("x", t0)
	if d := p.DrainDoneSending(); !reflect.DeepEqual(d, []string{"r"}) || p.Held() != 0 || p.Freed(FreeDone) != 1 {
		t.Fatalf("done sending %v, held %d, freed %d", d, p.Held(), p.Freed(FreeDone))
	}
}

// A pull that arrives after some layers ran gets them at once (one piece
// per layer), then the rest as computed; decode's prefix hit (first block
// 1) is never sent; a prefix hit on prefill (the step starts at token 4)
// counts as computed in every layer.
func TestStreamLateAttachAndPrefixHits(t *testing.T) {
	p := streamCore()
	table := []int{5, 6, 7, 8}
	p.Scheduled("x", "r", table, 4, 12, 14, t0) // block 0 from prefill's prefix cache
	p.LayerDone("x", 0)
	p.LayerDone("x", 1)
	p.Attach("x", 1, []int{31, 32, 33}, 14, t0)
	w := next(t, p, "x", StreamWrite)
	want := []LayerWrite{lw(0, []int{6, 7}, []int{31, 32}), lw(1, []int{6, 7}, []int{31, 32})}
	if !reflect.DeepEqual(w, want) {
		t.Fatalf("catch-up = %v, want %v (layer 2 not computed yet)", w, want)
	}
	p.LayerDone("x", 2)
	if w = next(t, p, "x", StreamWrite); !reflect.DeepEqual(w, []LayerWrite{lw(2, []int{6, 7}, []int{31, 32})}) {
		t.Fatalf("layer 2 = %v", w)
	}
	// The prefill finishes (its last chunk's hooks already ran for the
	// first two layers only: Finished queues what is left, layer by layer).
	p.Scheduled("x", "r", table, 12, 14, 14, t0)
	p.LayerDone("x", 0)
	p.Finished("x", "r", table, 14, true, t0)
	w = next(t, p, "x", StreamWrite)
	want = []LayerWrite{lw(0, []int{8}, []int{33}), lw(1, []int{8}, []int{33}), lw(2, []int{8}, []int{33})}
	if !reflect.DeepEqual(w, want) {
		t.Fatalf("last block = %v, want %v", w, want)
	}
	next(t, p, "x", StreamDone)
}

// A pull that attaches after the prefill finished gets every layer at once.
func TestStreamAttachAfterFinish(t *testing.T) {
	p := streamCore()
	p.Finished("x", "r", []int{3, 4}, 5, true, t0)
	p.Attach("x", 0, []int{7, 8}, 5, t0)
	w := next(t, p, "x", StreamWrite)
	if len(w) != 3 || !reflect.DeepEqual(w[2], lw(2, []int{3, 4}, []int{7, 8})) {
		t.Fatalf("writes %v", w)
	}
	next(t, p, "x", StreamDone)
	if st, _ := p.Attach("x", 0, []int{7, 8}, 5, t0); st != PullBusy {
		t.Fatalf("second attach = %v, want busy", st)
	}
}

// The prefill request aborted mid-stream: its blocks stay held (a write may
// read them) until the pusher ends, which answers prefill_failed; then they
// are freed and nothing is held.
func TestStreamAbortMidStream(t *testing.T) {
	p := streamCore()
	table := []int{1, 2, 3}
	p.Scheduled("x", "r", table, 0, 8, 12, t0)
	p.Attach("x", 0, []int{4, 5, 6}, 12, t0)
	p.LayerDone("x", 0)
	next(t, p, "x", StreamWrite) // the pusher writes layer 0 ...
	// ... while the engine aborts the request.
	if !p.Finished("x", "r", table, 12, false, t0) {
		t.Fatal("aborted request's blocks freed while its stream may read them")
	}
	if p.Held() != 1 {
		t.Fatalf("held %d", p.Held())
	}
	if p.LayerDone("x", 1) {
		t.Fatal("layer queued after the abort")
	}
	next(t, p, "x", StreamFailed)
	p.PushDone("x", t0)
	if d := p.DrainDoneSending(); !reflect.DeepEqual(d, []string{"r"}) || p.Held() != 0 {
		t.Fatalf("done sending %v, held %d", d, p.Held())
	}
}

// Decode releases mid-stream (client gone): the pusher stops (released);
// it ended before the prefill did, so the prefill's Finished frees at once.
func TestStreamReleaseBeforeFinish(t *testing.T) {
	p := streamCore()
	table := []int{1, 2}
	p.Scheduled("x", "r", table, 0, 4, 8, t0)
	p.Attach("x", 0, []int{4, 5}, 8, t0)
	if known, pushing := p.Release("x", t0); !known || !pushing {
		t.Fatalf("Release = %v %v", known, pushing)
	}
	p.LayerDone("x", 0)
	next(t, p, "x", StreamReleased)
	p.PushDone("x", t0)
	p.Scheduled("x", "r", table, 4, 8, 8, t0)
	if p.LayerDone("x", 0) {
		t.Fatal("a released stream queued a layer")
	}
	if p.Finished("x", "r", table, 8, true, t0) {
		t.Fatal("released transfer delay-freed")
	}
	if p.Held() != 0 || len(p.DrainDoneSending()) != 0 || p.Freed(FreeReleased) != 1 {
		t.Fatalf("released transfer held %d, freed (released) %d", p.Held(), p.Freed(FreeReleased))
	}
}

// Decode's pull times out after the prefill finished: the pusher ends, the
// blocks are freed (done), nothing stays held.
func TestStreamPusherEndsAfterFinish(t *testing.T) {
	p := streamCore()
	p.Scheduled("x", "r", []int{1}, 0, 3, 3, t0)
	p.Attach("x", 0, []int{2}, 3, t0)
	p.Finished("x", "r", []int{1}, 3, true, t0)
	p.PushDone("x", t0) // e.g. its write failed
	if d := p.DrainDoneSending(); !reflect.DeepEqual(d, []string{"r"}) || p.Held() != 0 {
		t.Fatalf("done sending %v held %d", d, p.Held())
	}
}

// A request preempted mid-stream (its blocks freed, maybe reused) breaks
// its stream; without a pull attached, its progress is forgotten instead
// and recomputed, then streamed from the start.
func TestStreamPreempted(t *testing.T) {
	p := streamCore()
	table := []int{1, 2}
	p.Scheduled("x", "r", table, 0, 8, 8, t0)
	p.Attach("x", 0, []int{4, 5}, 8, t0)
	p.LayerDone("x", 0)
	if tid, broken := p.Preempted("r"); tid != "x" || !broken {
		t.Fatalf("Preempted = %q %v", tid, broken)
	}
	next(t, p, "x", StreamBroken)
	if !p.Finished("x", "r", table, 8, true, t0) {
		t.Fatal("blocks of a broken stream freed before its pusher ended")
	}
	p.PushDone("x", t0)
	if d := p.DrainDoneSending(); len(d) != 1 || p.Held() != 0 {
		t.Fatalf("done sending %v held %d", d, p.Held())
	}

	// Not attached: preempted after a chunk, recomputed in new blocks.
	p.Scheduled("y", "s", []int{1, 2}, 0, 4, 8, t0)
	p.LayerDone("y", 0)
	if tid, broken := p.Preempted("s"); tid != "y" || broken {
		t.Fatalf("Preempted = %q %v", tid, broken)
	}
	p.Attach("y", 0, []int{6, 7}, 8, t0)
	next(t, p, "y", StreamIdle) // nothing computed any more
	p.Scheduled("y", "s", []int{8, 9}, 0, 8, 8, t0)
	p.LayerDone("y", 0)
	if w := next(t, p, "y", StreamWrite); !reflect.DeepEqual(w, []LayerWrite{lw(0, []int{8, 9}, []int{6, 7})}) {
		t.Fatalf("after recompute = %v", w)
	}
}

// With streaming off the step hooks do nothing and a pull attaches to
// nothing: whole-request transfer (StartPull) is unchanged.
func TestStreamOff(t *testing.T) {
	p := NewProducerCore(time.Minute)
	p.Scheduled("x", "r", []int{1}, 0, 3, 3, t0)
	if p.LayerDone("x", 0) || len(p.entries) != 0 {
		t.Fatal("whole-request core followed a step")
	}
}
