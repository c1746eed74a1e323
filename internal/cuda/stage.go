package cuda

import (
	"context"
	"fmt"
)

// Step moves one chunk: off is the chunk's offset in the whole transfer,
// buf the staging buffer holding (after fill) or to hold (before drain) it.
type Step func(ctx context.Context, off int, buf []byte) error

// Stage moves n bytes through the staging buffers bufs in chunks of
// len(bufs[i]) bytes (all the same length): fill puts chunk k into a free
// buffer, drain takes it out, in order. With two or more buffers, filling
// chunk k+1 overlaps draining chunk k, so a device copy hides behind the
// network (device -> remote: fill = copy from the GPU, drain = send;
// remote -> device: fill = receive, drain = copy to the GPU).
//
// Fill runs on one goroutine Stage owns and drain on the caller's; the
// first error from either stops both and is returned (the other side's
// cancellation is not reported), and Stage returns only after its goroutine
// ended, so no step runs after it returns.
func Stage(ctx context.Context, n int, bufs [][]byte, fill, drain Step) error {
	if n < 0 || len(bufs) == 0 || len(bufs[0]) == 0 {
		return fmt.Errorf("%w: stage %d bytes through %d buffers", ErrInvalid, n, len(bufs))
	}
	chunk := len(bufs[0])
	for _, b := range bufs {
		if len(b) != chunk {
			return fmt.Errorf("%w: staging buffers of different sizes", ErrInvalid)
		}
	}
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type filled struct {
		off, buf int
		n        int
	}
	free := make(chan int, len(bufs))
	for i := range bufs {
		free <- i
	}
	ready := make(chan filled, len(bufs))
	fillErr := make(chan error, 1)
	go func() {
		defer close(ready)
		for off := 0; off < n; off += chunk {
			var i int
			select {
			case i = <-free:
			case <-ctx.Done():
				fillErr <- ctx.Err()
				return
			}
			m := min(chunk, n-off)
			if err := fill(ctx, off, bufs[i][:m]); err != nil {
				fillErr <- err
				return
			}
			ready <- filled{off, i, m}
		}
		fillErr <- nil
	}()
	var drainErr error
	for f := range ready {
		if drainErr == nil {
			if drainErr = drain(ctx, f.off, bufs[f.buf][:f.n]); drainErr != nil {
				cancel()
			}
		}
		free <- f.buf
	}
	if err := <-fillErr; drainErr == nil {
		return err
	}
	return drainErr
}
