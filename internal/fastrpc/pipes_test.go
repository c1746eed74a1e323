//go:build linux

package fastrpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// startLocal serves echo on the same-host socket of a fresh address
// (startMux's TCP listener gives the name).
func startLocal(t *testing.T) (addr string, lm *Mux, stop func()) {
	t.Helper()
	addr, stopTCP := startMux(t)
	ll, err := ListenLocal(addr)
	if err != nil {
		stopTCP()
		t.Fatal(err)
	}
	lm = NewLocalMux(ll)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := lm.Run(ctx, echo); err != nil {
			t.Error(err)
		}
	})
	return addr, lm, func() { cancel(); wg.Wait(); stopTCP() }
}

func localConns(m *Mux) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.conns)
}

// TestLocalPipes: a same-host client's frames travel over the pipes it
// passed: small and large (many times a pipe's buffer) calls at once come
// back whole; the client's Close ends the server's side (end of its
// requests' pipe); the server's end ends the client's calls and Alive.
func TestLocalPipes(t *testing.T) {
	addr, lm, stop := startLocal(t)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	ctx := context.Background()
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.conn.(*pipeConn); !ok {
		t.Fatalf("same-host connection is a %T, want pipes", c.conn)
	}
	if c.Network() != "unix" {
		t.Fatalf("network %q, want unix", c.Network())
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			p := bytes.Repeat([]byte{byte(i), 1, 2}, 1+i*100000) // up to ~2 MiB
			want := make([]byte, len(p))
			for j, b := range p {
				want[len(p)-1-j] = b
			}
			got, err := c.Call(ctx, 1, p)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("call %d of %d bytes: %d bytes back, %v", i, len(p), len(got), err)
			}
		})
	}
	wg.Wait()
	if !c.Alive() {
		t.Fatalf("Alive = false on a working connection: %v", c.Err())
	}
	_ = c.Close()
	waitfor.Cond(t, 10*time.Second, "the server ends the closed client's connection", func() bool { return localConns(lm) == 0 })

	c2, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := c2.Call(ctx, 1, []byte("ab")); err != nil || string(got) != "ba" {
		t.Fatalf("second client: %q, %v", got, err)
	}
	stop()
	stopped = true
	// The TCP listener is gone too: a call cannot be sent again elsewhere.
	if _, err := c2.Call(ctx, 1, []byte("ab")); !errors.Is(err, ErrConnLost) && !errors.Is(err, ErrNotSent) {
		t.Fatalf("call after the server stopped: %v, want ErrConnLost or ErrNotSent", err)
	}
	if c2.Alive() {
		t.Fatal("Alive = true after the server stopped")
	}
}

// TestLocalWithoutPipes: a same-host server that does not take pipes (it
// closes a connection that does not start with Preface, as servers before
// pipes did) is dialled over its socket.
func TestLocalWithoutPipes(t *testing.T) {
	addr, stopTCP := startMux(t)
	defer stopTCP()
	ll, err := ListenLocal(addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ll.Close()
	wg.Go(func() {
		for {
			c, err := ll.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				head := make([]byte, len(Preface))
				if _, err := io.ReadFull(c, head); err != nil || string(head) != Preface {
					return // PrefacePipes: closed (its descriptors with it)
				}
				if _, err := c.Write([]byte(Preface)); err != nil {
					return
				}
				serveConn(c, bufio.NewReaderSize(c, 64<<10), echo)
			})
		}
	})
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.conn.(*net.UnixConn); !ok {
		t.Fatalf("connection to a server without pipes is a %T, want the unix socket", c.conn)
	}
	if got, err := c.Call(context.Background(), 1, []byte("xyz")); err != nil || string(got) != "zyx" {
		t.Fatalf("call = %q, %v", got, err)
	}
}

// TestLocalBadDescriptors: descriptors sent with the plain preface, or a
// pipes preface without its two descriptors, end the connection.
func TestLocalBadDescriptors(t *testing.T) {
	addr, lm, stop := startLocal(t)
	defer stop()
	r, w, err := newPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(r)
	defer syscall.Close(w)
	for _, tc := range []struct {
		name    string
		preface string
		fds     []int
	}{
		{"preface with descriptors", Preface, []int{r, w}},
		{"pipes preface without descriptors", PrefacePipes, nil},
		{"pipes preface with one descriptor", PrefacePipes, []int{r}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("unix", LocalName(addr))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var oob []byte
			if len(tc.fds) > 0 {
				oob = syscall.UnixRights(tc.fds...)
			}
			if _, _, err := conn.(*net.UnixConn).WriteMsgUnix([]byte(tc.preface), oob, nil); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := conn.Read(make([]byte, 8)); err == nil {
				t.Fatalf("got %d bytes, want the connection closed", n)
			}
		})
	}
	waitfor.Cond(t, 10*time.Second, "no connection left", func() bool { return localConns(lm) == 0 })
}
