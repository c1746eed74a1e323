package tcp

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/transport/registry"
)

// TestReadsGatheredWithWrites: READ responses the server gathers into one
// writev (large payloads in place, small ones inline, a rejected one with
// no payload) stay in order with WRITEs between them, and every span is
// released afterwards (Unregister returns).
func TestReadsGatheredWithWrites(t *testing.T) {
	reg := registry.New()
	remote := make([]byte, 8<<20)
	for i := range remote {
		remote[i] = byte(i*13 + 5)
	}
	if _, err := reg.Register(remote, "", false); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// One bulk lane and no express use for these sizes: everything large
	// is pipelined on one connection.
	p, err := DialPeer(ctx, PeerConfig{Lanes: 1, SmallMax: 1, MaxSlice: 1 << 20, Bulk: make(chan struct{}, 1)}, s.dial)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	base := registry.AddrOf(remote)
	local := make([]byte, 4<<20)
	src := bytes.Repeat([]byte{0xAB}, 1<<20)
	col := newCollector()
	sizes := []int{256 << 10, 1000, 300 << 10, 16 << 10, 1 << 20, 20000, 256 << 10}
	type rd struct{ off, n int }
	var reads []rd
	off, tag := 0, 0
	for i, n := range sizes {
		reads = append(reads, rd{off, n})
		if err := p.Enqueue(&Op{Remote: base + uint64(off), Buf: local[off : off+n], Done: col, Tag: tag}); err != nil {
			t.Fatal(err)
		}
		off += n
		tag++
		if i%3 == 1 { // a WRITE into the upper half between READs
			w := (4 << 20) + i*(128<<10)
			if err := p.Enqueue(&Op{Write: true, Remote: base + uint64(w), Buf: src[:100<<10], Done: col, Tag: tag}); err != nil {
				t.Fatal(err)
			}
			tag++
		}
		if i == 3 { // a rejected READ in the middle of a gather
			bad := tag
			if err := p.Enqueue(&Op{Remote: base + uint64(len(remote)) - 10, Buf: make([]byte, 100<<10), Done: col, Tag: bad}); err != nil {
				t.Fatal(err)
			}
			tag++
			defer func() {
				if !errors.Is(col.errs[bad], ErrRejected) {
					t.Errorf("rejected read: %v", col.errs[bad])
				}
			}()
		}
	}
	errs := col.wait(t, tag)
	rejected := 0
	for _, err := range errs {
		if errors.Is(err, ErrRejected) {
			rejected++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if rejected != 1 {
		t.Fatalf("%d rejected ops, want 1", rejected)
	}
	for _, r := range reads {
		if !bytes.Equal(local[r.off:r.off+r.n], remote[r.off:r.off+r.n]) {
			t.Fatalf("read at %d+%d differs", r.off, r.n)
		}
	}
	for i := range sizes {
		if i%3 == 1 {
			w := (4 << 20) + i*(128<<10)
			if !bytes.Equal(remote[w:w+100<<10], src[:100<<10]) {
				t.Fatalf("write %d not applied", i)
			}
		}
	}
	done := make(chan error, 1)
	go func() { _, err := reg.Unregister(base); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Unregister blocked: a span was not released")
	}
}
