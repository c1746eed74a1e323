package cuda

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestStageMovesEveryByteInOrder(t *testing.T) {
	src := make([]byte, 10_000+17)
	for i := range src {
		src[i] = byte(i * 31)
	}
	for _, nbuf := range []int{1, 2, 3} {
		for _, chunk := range []int{1, 1000, 4096, 20_000} {
			bufs := make([][]byte, nbuf)
			for i := range bufs {
				bufs[i] = make([]byte, chunk)
			}
			var dst []byte
			next := 0
			fill := func(_ context.Context, off int, b []byte) error { copy(b, src[off:]); return nil }
			drain := func(_ context.Context, off int, b []byte) error {
				if off != next {
					t.Errorf("drained offset %d, want %d", off, next)
				}
				next += len(b)
				dst = append(dst, b...)
				return nil
			}
			if err := Stage(t.Context(), len(src), bufs, fill, drain); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, src) {
				t.Fatalf("%d buffers of %d: bytes differ", nbuf, chunk)
			}
		}
	}
}

// TestStageOverlaps: with two buffers, chunk 1 is filled while chunk 0 is
// still being drained.
func TestStageOverlaps(t *testing.T) {
	bufs := [][]byte{make([]byte, 8), make([]byte, 8)}
	filled1 := make(chan struct{})
	fill := func(_ context.Context, off int, _ []byte) error {
		if off == 8 {
			close(filled1)
		}
		return nil
	}
	drain := func(ctx context.Context, off int, _ []byte) error {
		if off == 0 {
			select {
			case <-filled1: // the next fill ran during this drain
			case <-time.After(10 * time.Second):
				return errors.New("fill of chunk 1 did not overlap the drain of chunk 0")
			}
		}
		return nil
	}
	if err := Stage(t.Context(), 24, bufs, fill, drain); err != nil {
		t.Fatal(err)
	}
}

func TestStageErrors(t *testing.T) {
	bufs := [][]byte{make([]byte, 4), make([]byte, 4)}
	boom := errors.New("boom")
	ok := func(context.Context, int, []byte) error { return nil }
	var drained atomic.Int32
	failAt := func(at int) Step {
		return func(_ context.Context, off int, _ []byte) error {
			if off == at {
				return boom
			}
			return nil
		}
	}
	if err := Stage(t.Context(), 40, bufs, failAt(8), func(context.Context, int, []byte) error { drained.Add(1); return nil }); !errors.Is(err, boom) {
		t.Fatalf("fill error: %v", err)
	}
	if drained.Load() > 2 {
		t.Fatalf("%d chunks drained after the fill of chunk 2 failed", drained.Load())
	}
	if err := Stage(t.Context(), 40, bufs, ok, failAt(4)); !errors.Is(err, boom) {
		t.Fatalf("drain error: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Stage(ctx, 40, bufs, ok, ok); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if err := Stage(t.Context(), 4, nil, ok, ok); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no buffers: %v", err)
	}
	if err := Stage(t.Context(), 4, [][]byte{make([]byte, 4), make([]byte, 3)}, ok, ok); !errors.Is(err, ErrInvalid) {
		t.Fatalf("uneven buffers: %v", err)
	}
	if err := Stage(t.Context(), 0, bufs, failAt(0), failAt(0)); err != nil {
		t.Fatalf("zero bytes: %v", err)
	}
}
