package testbed

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Link is an app-level TCP forwarder on the driver's bed address that
// delays every chunk of bytes, in each direction, by Delay plus a uniform
// random jitter in [0, Jitter), keeping order. Point a role at Addr()
// instead of the target to put a slow link between them.
type Link struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	delay  time.Duration
	jitter time.Duration
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Forward starts a Link to target (host:port) listening on the driver's
// address; Close (or the bed's Close) stops it and its connections.
func (b *Bed) Forward(target string, delay, jitter time.Duration) (*Link, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(b.RootAddr(), "0"))
	if err != nil {
		return nil, err
	}
	l := &Link{ln: ln, target: target, delay: delay, jitter: jitter, conns: map[net.Conn]struct{}{}}
	b.mu.Lock()
	b.links = append(b.links, l)
	b.mu.Unlock()
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the forwarder's host:port.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// SetDelay changes the delay and jitter of new chunks.
func (l *Link) SetDelay(delay, jitter time.Duration) {
	l.mu.Lock()
	l.delay, l.jitter = delay, jitter
	l.mu.Unlock()
}

func (l *Link) lag() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.delay
	if l.jitter > 0 {
		d += time.Duration(rand.Int64N(int64(l.jitter)))
	}
	return d
}

func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		if !l.track(in) {
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer l.untrack(in)
			d := net.Dialer{Timeout: 5 * time.Second}
			out, err := d.Dial("tcp", l.target)
			if err != nil {
				return
			}
			if !l.track(out) {
				return
			}
			defer l.untrack(out)
			var pw sync.WaitGroup
			pw.Add(2)
			go func() { defer pw.Done(); l.pipe(out, in) }()
			go func() { defer pw.Done(); l.pipe(in, out) }()
			pw.Wait()
		}()
	}
}

type chunk struct {
	at time.Time
	b  []byte
}

// pipe copies src to dst, each chunk held until its due time.
func (l *Link) pipe(dst, src net.Conn) {
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if w := time.Until(c.at); w > 0 {
				time.Sleep(w) // the injected delay itself, not a readiness wait
			}
			if _, err := dst.Write(c.b); err != nil {
				src.Close()
				for range q {
				}
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	var last time.Time
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			at := time.Now().Add(l.lag())
			if at.Before(last) {
				at = last // keep order
			}
			last = at
			q <- chunk{at: at, b: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				dst.Close()
			}
			break
		}
	}
	close(q)
	<-done
}

// Close stops the listener and every forwarded connection.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

// Dial is a convenience for tests: a connection through the link.
func (l *Link) Dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", l.Addr())
}

// Links are the bed's forwarders, in creation order.
func (b *Bed) Links() []*Link {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*Link(nil), b.links...)
}
