package fastrpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"
)

// Errors of Call.
var (
	// ErrNotSent: the request did not leave (no connection, or the write
	// failed); the server has not seen it.
	ErrNotSent = errors.New("fastrpc: request not sent")
	// ErrConnLost: the connection ended while the call waited; the server
	// may or may not have handled the request.
	ErrConnLost = errors.New("fastrpc: connection lost")
	// ErrRemote: the server refused the request (unknown method, bad payload).
	ErrRemote = errors.New("fastrpc: refused by the server")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("fastrpc: client closed")
)

type result struct {
	payload []byte
	status  uint8
	err     error
}

// Client is one connection to a fastrpc server; concurrent calls share it.
// Once the connection fails every call fails (ErrNotSent for new ones):
// dial a new Client.
type Client struct {
	conn net.Conn
	done chan struct{} // closed when the reader has ended

	wmu  sync.Mutex
	wbuf []byte

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan result
	err     error // why the connection ended (nil while it works)
}

// Dial connects to the server whose TCP listener is at addr and sends the
// preface: over its same-host unix socket (LocalName(addr)) when it has
// one on this host, over TCP otherwise. The client's reader goroutine runs
// until Close or the connection fails.
func Dial(ctx context.Context, addr string) (*Client, error) {
	var d net.Dialer
	if runtime.GOOS == "linux" {
		if conn, err := d.DialContext(ctx, "unix", LocalName(addr)); err == nil {
			if c, err := handshake(ctx, conn, addr); err == nil {
				return c, nil
			}
		}
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fastrpc: dial %s: %w", addr, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return handshake(ctx, conn, addr)
}

// handshake exchanges the preface on conn and starts the reader; conn is
// closed when it fails.
func handshake(ctx context.Context, conn net.Conn, addr string) (*Client, error) {
	// The server answers the preface with its own: a server that speaks
	// only gRPC closes the connection instead.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	echo := make([]byte, len(Preface))
	if _, err := conn.Write([]byte(Preface)); err == nil {
		_, err = io.ReadFull(conn, echo)
	}
	_ = conn.SetDeadline(time.Time{})
	if string(echo) != Preface {
		_ = conn.Close()
		return nil, fmt.Errorf("fastrpc: dial %s: no fastrpc server (answered %q)", addr, echo)
	}
	c := &Client{conn: conn, done: make(chan struct{}), pending: map[uint64]chan result{}}
	go c.read()
	return c, nil
}

// Network is the connection's network: "unix" (the server's same-host
// socket) or "tcp".
func (c *Client) Network() string { return c.conn.LocalAddr().Network() }

// Err is why the connection ended, nil while it works.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection and waits for the reader; calls waiting fail
// with ErrConnLost.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	<-c.done
	return nil
}

// fail ends the connection (once) and fails every waiting call.
func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	_ = c.conn.Close()
	for id, ch := range c.pending {
		ch <- result{err: fmt.Errorf("%w: %w", ErrConnLost, err)}
		delete(c.pending, id)
	}
}

func (c *Client) read() {
	defer close(c.done)
	r := bufio.NewReaderSize(c.conn, 64<<10)
	for {
		st, id, payload, err := readFrame(r)
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch != nil { // nil: the caller gave up (ctx ended)
			ch <- result{payload: payload, status: st}
		}
	}
}

// Call sends a request and waits for its answer or ctx's end.
func (c *Client) Call(ctx context.Context, method uint8, req []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	ch := make(chan result, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()

	c.wmu.Lock()
	c.wbuf = appendFrame(c.wbuf[:0], method, id, req)
	_, err := c.conn.Write(c.wbuf)
	if err != nil {
		c.fail(err) // before anyone else writes: a torn frame is never completed
	}
	c.wmu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		if r.status != StatusOK {
			return nil, fmt.Errorf("%w: status %d: %s", ErrRemote, r.status, r.payload)
		}
		return r.payload, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}
