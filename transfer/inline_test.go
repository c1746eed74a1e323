package transfer

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestTransferLargeLocalCopies: Transfer runs local copies larger than
// inlineMax on the caller's goroutine after arming the deadline; the bytes
// land (plain, scatter-gather, and next to a TCP request of the same
// batch), and a caller whose context already ended gets ErrCanceled with
// nothing copied.
func TestTransferLargeLocalCopies(t *testing.T) {
	ini, tgt, seg := pair(t, TransportShm, nil)
	const size = 4 << 20
	managed, err := tgt.AllocateManaged(size)
	if err != nil {
		t.Fatal(err)
	}
	plain := make([]byte, 1<<20)
	if err := tgt.RegisterBytes(plain, ""); err != nil {
		t.Fatal(err)
	}
	if err := ini.PreparePeer(ctxT(t), tgt.Name()); err != nil {
		t.Fatal(err)
	}
	local := make([]byte, size)
	if err := ini.RegisterBytes(local, ""); err != nil {
		t.Fatal(err)
	}
	fill(local, 5)
	base := uint64(AddrOf(managed))
	// Two 1 MiB writes, a 1 MiB scatter-gather write of 2 KiB pieces
	// (every other piece of the source, packed in the target), and a TCP
	// write to plain memory.
	var ext []Extent
	for i := range 512 {
		ext = append(ext, Extent{Local: AddrOf(local[2<<20:]) + uintptr(i*4096), Remote: base + 2<<20 + uint64(i*2048), Length: 2048})
	}
	reqs := []Request{
		{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: base, Length: 1 << 20},
		{Op: OpWrite, Local: AddrOf(local[1<<20:]), Segment: seg, Remote: base + 1<<20, Length: 1 << 20},
		{Op: OpWrite, Segment: seg, Extents: ext},
		{Op: OpWrite, Local: AddrOf(local[3<<20:]), Segment: seg, Remote: uint64(AddrOf(plain)), Length: 1 << 20},
	}
	b, err := ini.Submit(ctxT(t), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if b.Transport(0) != TransportShm || b.Transport(2) != TransportShm || b.Transport(3) != TransportTCP {
		t.Fatalf("transports %q %q %q", b.Transport(0), b.Transport(2), b.Transport(3))
	}
	b.Free()
	clear(managed)
	clear(plain)
	if err := ini.Transfer(ctxT(t), reqs); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(managed[:2<<20], local[:2<<20]) || !bytes.Equal(plain, local[3<<20:]) {
		t.Fatal("plain writes differ")
	}
	for i := range 512 {
		if !bytes.Equal(managed[2<<20+i*2048:2<<20+(i+1)*2048], local[2<<20+i*4096:2<<20+i*4096+2048]) {
			t.Fatalf("scatter-gather piece %d differs", i)
		}
	}
	// The caller's context ended: nothing is copied.
	clear(managed)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = ini.Transfer(ctx, reqs[:3])
	if !errors.Is(err, ErrCanceled) {
		t.Fatalf("err = %v, want ErrCanceled", err)
	}
	if !bytes.Equal(managed, make([]byte, size)) {
		t.Fatal("a canceled transfer copied bytes")
	}
}
