package transfer

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestShmSameProcessAndFallback(t *testing.T) {
	ini, tgt, seg := pair(t, TransportShm, nil)
	managed, err := tgt.AllocateManaged(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	plain := make([]byte, 1<<20)
	_ = tgt.RegisterBytes(plain, "")
	local := make([]byte, 2<<20)
	_ = ini.RegisterBytes(local, "")
	fill(local, 21)
	// The initiator opened the segment before the buffer existed; the first
	// request naming it refetches the descriptor (once it is stale).
	waitfor.Cond(t, 10*time.Second, "shm for a newly allocated buffer", func() bool {
		b, err := ini.Submit(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(managed)), Length: 8}})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Wait(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		tr := b.Transport(0)
		b.Free()
		return tr == "shm"
	})
	b, err := ini.Submit(ctxT(t), []Request{
		{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(managed)), Length: 1 << 20},
		{Op: OpWrite, Local: AddrOf(local[1<<20:]), Segment: seg, Remote: uint64(AddrOf(plain)), Length: 1 << 20},
		{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(managed)) + (2 << 20) - 10, Length: 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Wait(ctxT(t))
	if !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("err = %v, want ErrOutOfBounds for the overrun", err)
	}
	if b.Transport(0) != "shm" || b.Transport(1) != "tcp" || b.Status(0) != StatusCompleted || b.Status(1) != StatusCompleted {
		t.Fatalf("transports %q %q statuses %v %v", b.Transport(0), b.Transport(1), b.Status(0), b.Status(1))
	}
	b.Free()
	if !bytes.Equal(managed[:1<<20], local[:1<<20]) || !bytes.Equal(plain, local[1<<20:]) {
		t.Fatal("data differs")
	}
	back := make([]byte, 1<<20)
	_ = ini.RegisterBytes(back, "")
	b, err = ini.Submit(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(back), Segment: seg, Remote: uint64(AddrOf(managed)), Length: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(ctxT(t)); err != nil || b.Transport(0) != "shm" {
		t.Fatalf("read: %v via %s", err, b.Transport(0))
	}
	b.Free()
	if !bytes.Equal(back, local[:1<<20]) {
		t.Fatal("read back differs")
	}

	// Free the managed buffer: the peer's mapping is revoked and the
	// address is rejected (through TCP's bounds check) from then on.
	addr := uint64(AddrOf(managed))
	if err := tgt.FreeManaged(managed); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 10*time.Second, "the mapping to be revoked", func() bool {
		b, err := ini.Submit(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: addr, Length: 64}})
		if err != nil {
			t.Fatal(err)
		}
		err = b.Wait(ctxT(t))
		tr := b.Transport(0)
		b.Free()
		if tr == "tcp" && !errors.Is(err, ErrOutOfBounds) {
			t.Fatalf("after free: %v", err)
		}
		return tr == "tcp"
	})
}

func TestShmAcrossProcesses(t *testing.T) {
	peer := startPeer(t, 4<<20, TransportShm)
	ini := openEngine(t, Config{Transport: TransportAuto})
	seg, err := ini.OpenSegment(ctxT(t), peer.name)
	if err != nil {
		t.Fatal(err)
	}
	local, err := ini.AllocateManaged(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 4<<20)
	_ = ini.RegisterBytes(back, "")
	fill(local, 22)
	var reqs []Request
	for i := 0; i < 4; i++ {
		reqs = append(reqs, Request{Op: OpWrite, Local: AddrOf(local[i<<20:]), Segment: seg, Remote: peer.addr + uint64(i<<20), Length: 1 << 20})
	}
	b, err := ini.Submit(ctxT(t), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		if b.Transport(i) != "shm" {
			t.Fatalf("request %d served by %s", i, b.Transport(i))
		}
	}
	b.Free()
	// Read back over TCP (a tcp-only engine) to check the peer really has it.
	tcpIni := openEngine(t, Config{Transport: TransportTCP})
	tseg, err := tcpIni.OpenSegment(ctxT(t), peer.name)
	if err != nil {
		t.Fatal(err)
	}
	_ = tcpIni.RegisterBytes(back, "")
	if err := tcpIni.Transfer(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(back), Segment: tseg, Remote: peer.addr, Length: 4 << 20}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, local) {
		t.Fatal("peer memory differs from what shm wrote")
	}
	if err := ini.FreeManaged(local); err != nil {
		t.Fatal(err)
	}
	if err := ini.FreeManaged(local); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("double free: %v", err)
	}
}
