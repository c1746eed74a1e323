package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// pending is how many bytes are queued for reading on c (SIOCINQ).
func pending(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatal(ierr)
	}
	return n
}

// TestFailedLaneDeliversNothingMore: a lane failed while a WRITE is in
// flight (a deadline passed, the peer stopped answering) must not let the
// kernel deliver the rest of the write later. The peer here accepts and
// reads nothing, so most of a 16 MiB write sits in the client's send
// queue when the lane fails; afterwards the peer may read what had
// already reached it and then gets a reset, never the rest (a plain
// close would deliver the send queue and then an orderly EOF).
func TestFailedLaneDeliversNothingMore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(ctx context.Context, _ int) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}
	p, err := DialPeer(ctx, PeerConfig{Lanes: 1, MaxSlice: 16 << 20}, dial)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range 2 { // express lane and the bulk lane
		select {
		case c := <-accepted:
			conns = append(conns, c)
			defer c.Close()
		case <-ctx.Done():
			t.Fatal("lanes not accepted")
		}
	}
	col := newCollector()
	const size = 16 << 20
	if err := p.Enqueue(&Op{Write: true, Remote: 1 << 20, Buf: make([]byte, size), Done: col}); err != nil {
		t.Fatal(err)
	}
	// The write has started: bytes wait on one of the lanes' server side.
	var srv net.Conn
	waitfor.Cond(t, 10*time.Second, "a byte of the write at the peer", func() bool {
		for _, c := range conns {
			if pending(t, c) > 0 {
				srv = c
				return true
			}
		}
		return false
	})
	p.Fail(errors.New("deadline passed"))
	p.Wait()
	if errs := col.wait(t, 1); errs[0] == nil {
		t.Fatal("the failed write completed without an error")
	}
	before := pending(t, srv)
	n, err := io.Copy(io.Discard, srv)
	if err == nil {
		t.Fatalf("the peer read %d bytes and an orderly end of stream after the lane failed (%d were queued): the rest of the failed write was delivered", n, before)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after the lane failed: %v, want a reset", err)
	}
	if n != int64(before) {
		t.Fatalf("the peer read %d bytes after the lane failed, %d were queued when it failed", n, before)
	}
	if n >= size {
		t.Fatalf("the whole write (%d bytes) reached the peer", n)
	}
}
