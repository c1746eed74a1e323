package fastrpc

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// startHolding serves echo, except that method 3 is answered only once
// release is closed (it holds the connection's reader, as a slow master
// would).
func startHolding(t *testing.T) (addr string, release func(), stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMux(ln)
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	var wg sync.WaitGroup
	wg.Go(func() {
		err := m.Run(ctx, func(method uint8, p []byte) ([]byte, uint8) {
			if method == 3 {
				<-held
				return []byte("late"), StatusOK
			}
			return echo(method, p)
		})
		if err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String(), release, func() { release(); cancel(); wg.Wait() }
}

// TestLongLivedCtxWatch: calls that pass one ctx without a deadline share
// one watch of it (no context.AfterFunc per call), its end still wakes a
// call blocked on the connection, and the connection then serves the
// next caller as before.
func TestLongLivedCtxWatch(t *testing.T) {
	addr, release, stop := startHolding(t)
	defer stop()
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var first *ctxWatch
	for i := range 5 {
		if got, err := c.Call(ctx, 1, []byte("ab")); err != nil || string(got) != "ba" {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
		w := c.watch.Load()
		if w == nil {
			t.Fatalf("call %d: no watch kept for a long-lived ctx", i)
		}
		if first == nil {
			first = w
		} else if w != first {
			t.Fatalf("call %d: a new watch of the same ctx", i)
		}
	}
	c.watchMu.Lock()
	marked := c.reading != nil
	c.watchMu.Unlock()
	if marked {
		t.Fatal("a reader is marked after the calls returned")
	}

	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, 3, nil)
		errc <- err
	}()
	// cancel while the call reads (or before it does: either way it must end).
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("call whose ctx was cancelled: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the end of a long-lived ctx did not wake its call")
	}
	release()
	// The held answer arrives and is dropped; the connection still works,
	// with no deadline left over from the cancelled call.
	for i := range 3 {
		if got, err := c.Call(context.Background(), 1, []byte("xyz")); err != nil || string(got) != "zyx" {
			t.Fatalf("call %d after the cancelled one: %q, %v", i, got, err)
		}
	}
}

// TestCtxEndsBetweenCalls: a kept watch whose ctx ends while nobody reads
// for it does not cut the next caller's read (its AfterFunc finds no
// reader of its ctx), and calls with a deadline keep no watch.
func TestCtxEndsBetweenCalls(t *testing.T) {
	addr, _, stop := startHolding(t)
	defer stop()
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		if got, err := c.Call(ctx, 1, []byte("ab")); err != nil || string(got) != "ba" {
			t.Fatalf("round %d: call: %q, %v", i, got, err)
		}
		cancel() // the kept watch fires now, with no reader of ctx
		other, cancel2 := context.WithCancel(context.Background())
		if got, err := c.Call(other, 1, []byte("cd")); err != nil || string(got) != "dc" {
			t.Fatalf("round %d: call of another ctx after the first ended: %q, %v", i, got, err)
		}
		cancel2()
	}
	tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Call(tctx, 1, []byte("ab")); err != nil {
		t.Fatal(err)
	}
	if c.watch.Load() != nil {
		t.Fatal("a watch was kept for a ctx with a deadline (made for the call)")
	}
}

// TestCloseDropsWatch: a closed connection keeps no AfterFunc on the
// caller's long-lived ctx (which would keep the connection alive with it).
func TestCloseDropsWatch(t *testing.T) {
	addr, _, stop := startHolding(t)
	defer stop()
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.Call(ctx, 1, []byte("ab")); err != nil {
		t.Fatal(err)
	}
	if c.watch.Load() == nil {
		t.Fatal("no watch kept")
	}
	_ = c.Close()
	if c.watch.Load() != nil {
		t.Fatal("Close kept the watch")
	}
}

// TestLongLivedCtxCallAllocs: a call under a long-lived cancellable ctx
// allocates no more than one under context.Background (the watch is made
// once, not per call).
func TestLongLivedCtxCallAllocs(t *testing.T) {
	addr, _, stop := startHolding(t)
	defer stop()
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := []byte("abcdefgh")
	call := func(ctx context.Context) func() {
		return func() {
			if _, err := c.Call(ctx, 1, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	bg := testing.AllocsPerRun(200, call(context.Background()))
	ll := testing.AllocsPerRun(200, call(ctx))
	t.Logf("allocations per call: %.1f with a long-lived ctx, %.1f with Background", ll, bg)
	if ll > bg {
		t.Fatalf("allocations per call: %.1f with a long-lived ctx, %.1f with Background", ll, bg)
	}
}

// TestCancelLeavesNoPastDeadline: calls of long-lived contexts cancelled
// while they read never leave the idle connection a read deadline in the
// past (which the peek of Alive would take for a failure): the peek finds
// the connection open after every one.
func TestCancelLeavesNoPastDeadline(t *testing.T) {
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
	for i := range 100 {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := c.Call(ctx, 1, []byte("x"))
			errc <- err
		}()
		if i%2 == 0 {
			runtime.Gosched() // half the time, let the call start reading first
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: %v, want context.Canceled", i, err)
		}
		if err := peekClosed(c.conn); err != nil {
			t.Fatalf("round %d: the idle connection's peek failed: %v", i, err)
		}
	}
	if c.Err() != nil {
		t.Fatalf("connection ended: %v", c.Err())
	}
}

// TestAliveAfterIdleDeadline: a call's read deadline that passes while
// the connection idles (it stays set for the next call) does not make
// Alive take the connection for failed.
func TestAliveAfterIdleDeadline(t *testing.T) {
	addr, stop := startMux(t) // TCP: the deadline is on the socket Alive peeks
	defer stop()
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dl := time.Now().Add(30 * time.Millisecond)
	if got, err := c.CallBy(context.Background(), dl, 1, []byte("ab")); err != nil || string(got) != "ba" {
		t.Fatalf("call: %q, %v", got, err)
	}
	waitfor.Cond(t, 10*time.Second, "the call's deadline and RecentWindow pass", func() bool {
		return time.Now().After(dl.Add(2 * RecentWindow))
	})
	if !c.Alive() || c.Err() != nil {
		t.Fatalf("Alive after an idle deadline passed: false (%v)", c.Err())
	}
	if got, err := c.CallBy(context.Background(), time.Now().Add(10*time.Second), 1, []byte("cd")); err != nil || string(got) != "dc" {
		t.Fatalf("call after: %q, %v", got, err)
	}
}
