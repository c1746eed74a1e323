package transfer

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// TestInlineBatchesRecycled: Transfer calls whose small local copies run
// inline reuse their batches (a call allocates less than a batch and its
// tasks), and concurrent ones, mixed with TCP writes (asynchronous jobs,
// never recycled) and failing calls, still move exactly their own bytes.
func TestInlineBatchesRecycled(t *testing.T) {
	ini, tgt, seg := pair(t, TransportShm, nil)
	managed, err := tgt.AllocateManaged(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	plain := make([]byte, 1<<20) // not shareable: served over TCP
	if err := tgt.RegisterBytes(plain, ""); err != nil {
		t.Fatal(err)
	}
	if err := ini.PreparePeer(ctxT(t), tgt.Name()); err != nil {
		t.Fatal(err)
	}
	local := make([]byte, 1<<20)
	if err := ini.RegisterBytes(local, ""); err != nil {
		t.Fatal(err)
	}
	fill(local, 9)
	base, pbase := uint64(AddrOf(managed)), uint64(AddrOf(plain))
	reqs := []Request{
		{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: base, Length: 4096},
		{Op: OpWrite, Local: AddrOf(local[4096:]), Segment: seg, Remote: base + 4096, Length: 64},
	}
	if err := ini.Transfer(ctxT(t), reqs); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	allocs := testing.AllocsPerRun(200, func() {
		if err := ini.Transfer(ctx, reqs); err != nil {
			t.Fatal(err)
		}
	})
	// With a fresh batch this call made seven allocations; recycled, the
	// batch and its task list are not made again.
	if !raceEnabled && allocs > 5 {
		t.Fatalf("%.1f allocations per inline Transfer of two copies, want at most 5", allocs)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			off := g * (64 << 10)
			for i := range 200 {
				n := 512 + (i%7)*512
				var rs []Request
				switch i % 5 {
				case 0: // a TCP write next to a local copy: asynchronous, not recycled
					rs = []Request{{Op: OpWrite, Local: AddrOf(local[off:]), Segment: seg, Remote: pbase + uint64(off), Length: n},
						{Op: OpWrite, Local: AddrOf(local[off:]), Segment: seg, Remote: base + uint64(off), Length: n}}
				case 1: // refused: unknown segment
					rs = []Request{{Op: OpWrite, Local: AddrOf(local[off:]), Segment: seg + 1000, Remote: base, Length: n}}
				default:
					rs = []Request{{Op: OpWrite, Local: AddrOf(local[off+i:]), Segment: seg, Remote: base + uint64(off), Length: n}}
				}
				err := ini.Transfer(ctx, rs)
				if (err != nil) != (i%5 == 1) {
					errs <- fmt.Errorf("goroutine %d call %d: %v", g, i, err)
					return
				}
				if i%5 == 1 {
					continue
				}
				src := local[off : off+n]
				if i%5 != 0 {
					src = local[off+i : off+i+n]
				}
				if !bytes.Equal(managed[off:off+n], src) {
					errs <- fmt.Errorf("goroutine %d call %d: the copy differs", g, i)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
