package fastrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo answers method 1 with the payload reversed, method 2 with an
// error status, and refuses the others.
func echo(method uint8, p []byte) ([]byte, uint8) {
	switch method {
	case 1:
		out := make([]byte, len(p))
		for i, b := range p {
			out[len(p)-1-i] = b
		}
		return out, StatusOK
	case 2:
		return []byte("bad"), StatusBadRequest
	}
	return nil, StatusUnknownMethod
}

// startMux serves echo on a loopback listener; the gRPC side accepts
// connections and echoes their bytes back verbatim.
func startMux(t *testing.T) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMux(ln)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := m.Run(ctx, echo); err != nil {
			t.Error(err)
		}
	})
	wg.Go(func() {
		for {
			c, err := m.GRPC().Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); _, _ = io.Copy(c, c) })
		}
	})
	return ln.Addr().String(), func() { cancel(); wg.Wait() }
}

func TestCallRoundTrip(t *testing.T) {
	addr, stop := startMux(t)
	defer stop()
	ctx := context.Background()
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Call(ctx, 1, []byte("abc"))
	if err != nil || string(got) != "cba" {
		t.Fatalf("call = %q, %v", got, err)
	}
	if _, err := c.Call(ctx, 2, nil); !errors.Is(err, ErrRemote) {
		t.Fatalf("error status: %v, want ErrRemote", err)
	}
	if _, err := c.Call(ctx, 9, nil); !errors.Is(err, ErrRemote) {
		t.Fatalf("unknown method: %v, want ErrRemote", err)
	}
	big := bytes.Repeat([]byte{1, 2, 3}, 100000)
	if got, err := c.Call(ctx, 1, big); err != nil || len(got) != len(big) || got[0] != 3 {
		t.Fatalf("big call: %d bytes, %v", len(got), err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	addr, stop := startMux(t)
	defer stop()
	ctx := context.Background()
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				msg := fmt.Sprintf("%d-%d", g, i)
				got, err := c.Call(ctx, 1, []byte(msg))
				want := []byte(msg)
				for a, b := 0, len(want)-1; a < b; a, b = a+1, b-1 {
					want[a], want[b] = want[b], want[a]
				}
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("call %s = %q, %v", msg, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Other protocols' connections reach the gRPC listener with their bytes intact.
func TestMuxPassesOtherConnections(t *testing.T) {
	addr, stop := startMux(t)
	defer stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echoed %q, %v", got, err)
	}
}

// A server that goes away fails the waiting call with ErrConnLost and
// later calls with ErrNotSent.
func TestServerGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			got <- fakeServer(c)
		}
	}()
	c, err := Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := <-got
	errc := make(chan error, 1)
	go func() { _, err := c.Call(context.Background(), 1, []byte("x")); errc <- err }()
	// Read the preface and the request, then hang up without answering.
	r := bufio.NewReader(srv)
	if _, err := io.ReadFull(r, make([]byte, headerLen+1)); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if err := <-errc; !errors.Is(err, ErrConnLost) {
		t.Fatalf("waiting call: %v, want ErrConnLost", err)
	}
	if _, err := c.Call(context.Background(), 1, nil); !errors.Is(err, ErrNotSent) {
		t.Fatalf("later call: %v, want ErrNotSent", err)
	}
	if c.Err() == nil {
		t.Fatal("Err() = nil after the connection ended")
	}
}

func TestCallContextEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hold := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			hold <- fakeServer(c) // never answers
		}
	}()
	c, err := Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer func() { (<-hold).Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Call(ctx, 1, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call past its deadline: %v", err)
	}
}

// A frame longer than MaxFrame ends the connection on the server.
func TestServerRefusesHugeFrame(t *testing.T) {
	addr, stop := startMux(t)
	defer stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame := []byte(Preface)
	frame = append(frame, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0, 0)
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, len(Preface))); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("server answered %d bytes to an oversized frame", n)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, 1, 7, []byte("hello")))
	f.Add([]byte{9, 0, 0, 0, 1, 2, 3})
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		for {
			kind, id, payload, err := readFrame(r)
			if err != nil {
				return
			}
			// A decoded frame encodes back to the bytes it came from.
			again := appendFrame(nil, kind, id, payload)
			if len(again) > len(b) || !bytes.Equal(again, b[:len(again)]) {
				t.Fatalf("frame does not round trip")
			}
			b = b[len(again):]
		}
	})
}

// The server loop on arbitrary bytes never panics and answers only whole frames.
func FuzzServeConn(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, 1, 1, []byte("ab")), 3, 2, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, z := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			serveConn(z, bufio.NewReader(z), echo)
			z.Close()
		}()
		go func() { _, _ = a.Write(b); _ = a.Close() }()
		<-done
	})
}

// fakeServer reads the client's preface and answers it.
func fakeServer(c net.Conn) net.Conn {
	if _, err := io.ReadFull(c, make([]byte, len(Preface))); err == nil {
		_, _ = c.Write([]byte(Preface))
	}
	return c
}

// A server that does not speak fastrpc fails Dial.
func TestDialNonFastrpcServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.ReadFull(c, make([]byte, len(Preface)))
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := Dial(ctx, ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("Dial succeeded against a server that hung up")
	}
}

// TestLocalSocket: a server with a same-host socket is dialled there; a
// connection that is not fastrpc is closed there; once the local socket is
// gone, Dial uses TCP.
func TestLocalSocket(t *testing.T) {
	addr, stop := startMux(t)
	defer stop()
	ll, err := ListenLocal(addr)
	if runtime.GOOS != "linux" {
		if err == nil {
			t.Fatal("ListenLocal worked off Linux")
		}
		t.Skip("abstract unix sockets are Linux only")
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ListenLocal(addr); err == nil {
		t.Fatal("a second ListenLocal of one address worked")
	}
	lm := NewLocalMux(ll)
	if lm.GRPC() != nil {
		t.Fatal("local mux has a gRPC listener")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := lm.Run(ctx, echo); err != nil {
			t.Error(err)
		}
	})
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if c.Network() != "unix" {
		t.Fatalf("network %q, want unix", c.Network())
	}
	if got, err := c.Call(ctx, 1, []byte("xyz")); err != nil || string(got) != "zyx" {
		t.Fatalf("call over the local socket = %q, %v", got, err)
	}
	raw, err := net.Dial("unix", LocalName(addr))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = raw.Write([]byte("PRI * HTTP/2.0\r\n"))
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := raw.Read(make([]byte, 8)); err == nil {
		t.Fatalf("a non-fastrpc connection on the local socket got %d bytes, want it closed", n)
	}
	_ = raw.Close()

	cancel()
	wg.Wait()
	_ = c.Close()
	c2, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.Network() != "tcp" {
		t.Fatalf("network %q after the local socket closed, want tcp", c2.Network())
	}
	if got, err := c2.Call(context.Background(), 1, []byte("ab")); err != nil || string(got) != "ba" {
		t.Fatalf("call over tcp = %q, %v", got, err)
	}
}

// oneByOne reads at most k bytes per Read, so frames arrive in pieces.
type oneByOne struct {
	b []byte
	k int
}

func (o *oneByOne) Read(p []byte) (int, error) {
	if len(o.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), o.k)], o.b)
	o.b = o.b[n:]
	return n, nil
}

// FuzzFrameReader: the client's resumable frameReader and the server's
// readFrameView (with a buffer small enough that long payloads take its
// other path) read the same frames as readFrame from any bytes, in any
// read sizes, and fail where it fails.
func FuzzFrameReader(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, 0, 7, []byte("abc")), 1, 9, nil), uint8(1))
	f.Add(appendFrame(nil, 0, 1, bytes.Repeat([]byte{5}, 70000)), uint8(100))
	f.Add([]byte{3, 0, 0, 0, 1}, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, k uint8) {
		want := bufio.NewReader(bytes.NewReader(data))
		var fr frameReader
		src := &oneByOne{b: data, k: int(k%64) + 1}
		view := bufio.NewReaderSize(&oneByOne{b: data, k: int(k%64) + 1}, 32)
		var big []byte
		for {
			k1, id1, p1, err1 := readFrame(want)
			k2, id2, p2, err2 := fr.next(src)
			k3, id3, p3, used, err3 := readFrameView(view, &big)
			if (err1 == nil) != (err2 == nil) || (err1 == nil) != (err3 == nil) {
				t.Fatalf("readFrame err %v, frameReader err %v, readFrameView err %v", err1, err2, err3)
			}
			if err1 != nil {
				return
			}
			if k1 != k2 || id1 != id2 || !bytes.Equal(p1, p2) {
				t.Fatalf("frames differ: %d %d %q / %d %d %q", k1, id1, p1, k2, id2, p2)
			}
			if k1 != k3 || id1 != id3 || !bytes.Equal(p1, p3) {
				t.Fatalf("view differs: %d %d %q / %d %d %q", k1, id1, p1, k3, id3, p3)
			}
			if _, err := view.Discard(used); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestReaderHandsOver: many concurrent calls on one connection, some
// with short deadlines that end while they hold the read side, all
// others still get their own answers.
func TestReaderHandsOver(t *testing.T) {
	addr, stop := startMux(t)
	defer stop()
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	var bad sync.Map
	for g := range 16 {
		wg.Go(func() {
			for i := range 300 {
				msg := []byte(fmt.Sprintf("%d-%d", g, i))
				ctx, cancel := context.Background(), func() {}
				if i%7 == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%5)*time.Microsecond)
				}
				got, err := c.Call(ctx, 1, msg)
				cancel()
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						bad.Store(string(msg), err.Error())
					}
					continue
				}
				if want := reverse(msg); !bytes.Equal(got, want) {
					bad.Store(string(msg), string(got))
				}
			}
		})
	}
	wg.Wait()
	bad.Range(func(k, v any) bool { t.Errorf("call %s: %v", k, v); return true })
	if !c.Alive() || c.Err() != nil {
		t.Fatalf("connection ended: %v", c.Err())
	}
}

func reverse(p []byte) []byte {
	out := make([]byte, len(p))
	for i, b := range p {
		out[len(p)-1-i] = b
	}
	return out
}

// TestAliveNoticesServerEnd: with no call in flight, Alive finds a
// connection the server closed, and Err says so.
func TestAliveNoticesServerEnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			got <- fakeServer(c)
		}
	}()
	c, err := Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := <-got
	if !c.Alive() {
		t.Fatalf("Alive = false on an open connection: %v", c.Err())
	}
	srv.Close()
	if runtime.GOOS == "linux" {
		waitfor.Cond(t, 10*time.Second, "Alive notices the end", func() bool { return !c.Alive() })
		if c.Err() == nil {
			t.Fatal("Err() = nil after Alive noticed the end")
		}
	}
	if _, err := c.Call(context.Background(), 1, nil); err == nil {
		t.Fatal("call on a closed connection worked")
	}
}

// TestCallByDeadline: a call whose deadline passes before the answer
// fails with context.DeadlineExceeded (no context deadline involved); the
// answer that comes later is dropped, and a later call with a longer
// deadline, whose read starts under the earlier call's read deadline,
// still gets its own answer after that deadline passed.
func TestCallByDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			got <- fakeServer(c)
		}
	}()
	c, err := Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := <-got
	defer srv.Close()
	ctx := context.Background()
	r := bufio.NewReader(srv)
	answer := func() { // answers the next request, echoing its payload
		_, id, p, err := readFrame(r)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := srv.Write(appendFrame(nil, StatusOK, id, p)); err != nil {
			t.Error(err)
		}
	}

	start := time.Now()
	if _, err := c.CallBy(ctx, start.Add(30*time.Millisecond), 1, []byte("late")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call past its deadline: %v, want DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("a 30ms deadline waited %v", waited)
	}
	answer() // the late call's answer: nobody waits for it any more

	// The read deadline the first call left is in the past; this call's
	// read wakes on it, moves it and reads on to its own answer.
	done := make(chan error, 1)
	go func() {
		out, err := c.CallBy(ctx, time.Now().Add(10*time.Second), 1, []byte("second"))
		if err == nil && string(out) != "second" {
			err = fmt.Errorf("answer %q", out)
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // the server is slow on purpose: longer than the first deadline
	answer()
	if err := <-done; err != nil {
		t.Fatalf("second call: %v", err)
	}
	if c.Err() != nil {
		t.Fatalf("connection ended: %v", c.Err())
	}
}

// readFrame reads one frame the plain way: the reference the server's
// readFrameView and the client's frameReader are checked against. The
// payload is a new slice the caller owns.
func readFrame(r *bufio.Reader) (kind uint8, id uint64, payload []byte, err error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[:4])
	if n < 9 || n > MaxFrame {
		return 0, 0, nil, fmt.Errorf("%w: length %d", ErrFrame, n)
	}
	payload = make([]byte, n-9)
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, err
	}
	return h[4], binary.LittleEndian.Uint64(h[5:13]), payload, nil
}
