//go:build linux

package fastrpc

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// rawPair is a connected pair of loopback TCP connections.
func rawPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestRawIO: raw system-call I/O moves more than the socket buffers hold
// (writes and reads wait in the netpoller), honours read deadlines and
// reports the peer's close as io.EOF.
func TestRawIO(t *testing.T) {
	a, b := rawPair(t)
	ra, rb := newRawIO(a), newRawIO(b)
	if _, ok := ra.(*rawIO); !ok {
		t.Fatalf("a TCP connection got %T, want *rawIO", ra)
	}
	want := make([]byte, 16<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	werr := make(chan error, 1)
	go func() {
		n, err := ra.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		werr <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(rb, got); err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes differ")
	}

	if err := b.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var one [1]byte
	if _, err := rb.Read(one[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if _, err := rb.Read(one[:]); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout net.Error", err)
	}
	_ = b.SetReadDeadline(time.Time{})

	a.Close()
	if _, err := rb.Read(one[:]); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
	b.Close()
	if _, err := rb.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write on a closed connection: %v, want net.ErrClosed", err)
	}
}

// TestRawIONotASocket: a connection without a file descriptor is used as is.
func TestRawIONotASocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := newRawIO(a); got != io.ReadWriter(a) {
		t.Fatalf("net.Pipe got %T, want the connection itself", got)
	}
}
