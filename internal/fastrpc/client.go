package fastrpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
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
//
// There is no reader goroutine: a caller writes its request and then
// either finds its answer delivered or takes the read token (lead) and
// reads answers itself, delivering the others' to their channels, until
// its own comes; then it hands the token back for the next waiting caller.
// With one call in flight (the common case) the answer wakes its caller
// straight from the netpoller, with no hand-off between goroutines.
type Client struct {
	conn net.Conn
	io   io.ReadWriter // conn's reads and writes (newRawIO)
	lead chan struct{} // holds the read token while no caller reads
	rd   frameReader   // read side; only the token's holder touches it

	wmu     sync.Mutex
	wpend   []byte // frames waiting for the writer
	wspare  []byte // the buffer the writer sent last, reused
	writing bool   // a caller is writing wpend out

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan result
	err     error // why the connection ended (nil while it works)

	lastRecv atomic.Int64 // unix nanoseconds of the last answer read
	rdl      time.Time    // the connection's read deadline; only the token's holder touches it

	// The end of a reader's ctx wakes its Read (watchCtx). One watch is
	// kept across calls for a ctx without a deadline, so callers that pass
	// one long-lived ctx register one context.AfterFunc, not one per call.
	watch   atomic.Pointer[ctxWatch] // the ctx watched; replaced only by the token's holder, dropped by fail
	watchMu sync.Mutex               // orders a watch's wake-up against the end of its read
	reading *ctxWatch                // the watch of the reader's ctx while it reads (nil otherwise); watchMu
}

// RecentWindow: Alive trusts a connection that delivered an answer this
// recently without checking the socket. A master that restarted cannot
// have handed anything out again so soon after its last answer (it has to
// start, take its storage nodes' segments back and take a put first).
const RecentWindow = time.Millisecond

// chPool recycles the one-answer channels of calls that received their
// answer (a call that gave up leaves its channel to the collector: an
// answer may still be sent to it).
var chPool = sync.Pool{New: func() any { return make(chan result, 1) }}

// Dial connects to the server whose TCP listener is at addr and sends the
// preface: over its same-host unix socket (LocalName(addr)) when it has
// one on this host, over TCP otherwise.
func Dial(ctx context.Context, addr string) (*Client, error) {
	return DialWith(ctx, addr, DialOptions{})
}

// DialOptions are a connection's credential and transport security.
type DialOptions struct {
	// Credential, when set, is sent in a MethodHello frame right after the
	// preface; a refusal fails the dial with ErrUnauthenticated.
	Credential []byte
	// TLS, when set, wraps the TCP connection in TLS (the same-host socket
	// is not used: a TLS master does not serve it).
	TLS *tls.Config
}

// ErrUnauthenticated: the server refused the connection's credential.
var ErrUnauthenticated = errors.New("fastrpc: unauthenticated")

// DialWith is Dial with a credential and TLS.
func DialWith(ctx context.Context, addr string, o DialOptions) (*Client, error) {
	var d net.Dialer
	if runtime.GOOS == "linux" && o.TLS == nil {
		if c, err := dialLocal(ctx, addr, o.Credential); err == nil || errors.Is(err, ErrUnauthenticated) {
			return c, err
		}
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fastrpc: dial %s: %w", addr, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if o.TLS != nil {
		cfg := o.TLS
		if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("fastrpc: dial %s: tls: %w", addr, err)
		}
		conn = tc
	}
	return handshake(ctx, conn, addr, o.Credential, true)
}

// dialLocal connects to the server's same-host socket, over pipes when the
// server takes them (PrefacePipes), over the socket itself otherwise.
func dialLocal(ctx context.Context, addr string, cred []byte) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", LocalName(addr))
	if err != nil {
		return nil, err
	}
	if pc, err := dialPipes(ctx, conn.(*net.UnixConn)); err == nil {
		return handshake(ctx, pc, addr, cred, false)
	}
	// A server that does not take pipes closed that connection.
	if conn, err = d.DialContext(ctx, "unix", LocalName(addr)); err != nil {
		return nil, err
	}
	return handshake(ctx, conn, addr, cred, true)
}

// handshake exchanges the preface on conn (unless it was, for pipes), and
// the credential frame when there is one; conn is closed when it fails.
func handshake(ctx context.Context, conn net.Conn, addr string, cred []byte, preface bool) (*Client, error) {
	// The server answers the preface with its own: a server that speaks
	// only gRPC closes the connection instead.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	defer func() { _ = conn.SetDeadline(time.Time{}) }()
	var out []byte
	if preface {
		out = []byte(Preface)
	}
	if cred != nil {
		out = appendFrame(out, MethodHello, 0, cred)
	}
	if preface || cred != nil {
		echo := make([]byte, len(Preface))
		_, err := conn.Write(out)
		if err == nil && preface {
			_, err = io.ReadFull(conn, echo)
		}
		if err != nil || preface && string(echo) != Preface {
			_ = conn.Close()
			return nil, fmt.Errorf("fastrpc: dial %s: no fastrpc server (answered %q): %v", addr, echo, err)
		}
	}
	c := &Client{conn: conn, io: newRawIO(conn), lead: make(chan struct{}, 1), pending: map[uint64]chan result{}}
	if cred != nil {
		st, _, payload, err := c.rd.next(c.io)
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("fastrpc: dial %s: credential: %w", addr, err)
		}
		if st != StatusOK {
			_ = conn.Close()
			return nil, fmt.Errorf("%w: %s", ErrUnauthenticated, payload)
		}
	}
	c.lead <- struct{}{}
	return c, nil
}

// Network is the connection's network: "unix" (the server's same-host
// socket) or "tcp".
func (c *Client) Network() string { return c.conn.LocalAddr().Network() }

// Err is why the connection ended, nil while it works as far as the
// client knows: with no call in flight, a connection the server closed is
// noticed by the next call or by Alive.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Alive reports whether the connection still works: at once when an answer
// arrived within RecentWindow, otherwise by checking the socket (one
// non-blocking peek, no data consumed) when no caller is reading it; a
// connection the server closed or reset is ended (Err says why).
func (c *Client) Alive() bool {
	if c.Err() != nil {
		return false
	}
	if time.Now().UnixNano()-c.lastRecv.Load() < int64(RecentWindow) {
		return true // answered just now (RecentWindow)
	}
	select {
	case <-c.lead:
	default:
		return c.Err() == nil // a caller reads: it notices an end itself
	}
	defer func() { c.lead <- struct{}{} }()
	if c.rd.buffered() > 0 {
		return c.Err() == nil
	}
	err := peekClosed(c.conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// A call's read deadline that passed while the connection idled
		// (readUntil leaves it set for the next call): no failure.
		_ = c.conn.SetReadDeadline(time.Time{})
		c.rdl = time.Time{}
		err = peekClosed(c.conn)
	}
	if err != nil {
		c.fail(err)
		return false
	}
	return c.Err() == nil
}

// Close ends the connection; calls waiting fail with ErrConnLost.
func (c *Client) Close() error {
	c.fail(ErrClosed)
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
	c.dropWatch()
	for id, ch := range c.pending {
		ch <- result{err: fmt.Errorf("%w: %w", ErrConnLost, err)}
		delete(c.pending, id)
	}
}

// deliver hands an answer to its call; one that no call waits for (the
// caller gave up) is dropped.
func (c *Client) deliver(id uint64, r result) {
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ch != nil {
		ch <- r // buffered, and each call gets one result
	}
}

// forget removes a call that gave up.
func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// aLongTimeAgo is a read deadline in the past: it wakes a blocked Read.
var aLongTimeAgo = time.Unix(1, 0)

// errDeadline: a call's deadline passed before its answer came.
var errDeadline = fmt.Errorf("fastrpc: %w", context.DeadlineExceeded)

// readUntil reads answers, delivering each, until call id's arrives on ch,
// or fails with ctx's error or errDeadline when ctx ends or deadline (zero:
// none) passes first. The caller holds the read token.
//
// The connection's read deadline is moved only when it would wake this
// reader too late (or never): callers' deadlines are mostly "now + the RPC
// timeout", later than the one already set, so most calls set none; one
// set by an earlier caller that passes first wakes this reader, which
// then moves it to its own and reads on (a frame read in part stays
// buffered).
func (c *Client) readUntil(ctx context.Context, id uint64, ch chan result, deadline time.Time) (result, error) {
	select {
	case r := <-ch: // came while this caller waited for the token
		return r, nil
	default:
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	if !deadline.IsZero() && (c.rdl.IsZero() || c.rdl.After(deadline)) {
		_ = c.conn.SetReadDeadline(deadline)
		c.rdl = deadline
	}
	if done := ctx.Done(); done != nil {
		c.watchCtx(ctx, done)
		defer c.unwatchCtx(ctx)
		// Checked again now that the watch is on: an end just before it
		// would not have woken this reader.
		if err := ctx.Err(); err != nil {
			return result{}, err
		}
	}
	for {
		st, fid, payload, err := c.rd.next(c.io)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// The frame read so far stays buffered.
				if err := ctx.Err(); err != nil {
					return result{}, err
				}
				if !deadline.IsZero() && !time.Now().Before(deadline) {
					return result{}, errDeadline
				}
				// An earlier caller's deadline (or none of this caller's):
				// read on until this caller's own. ctx is checked again
				// after the move: had it ended just before, the move may
				// have undone the wake-up its AfterFunc set.
				_ = c.conn.SetReadDeadline(deadline)
				c.rdl = deadline
				if err := ctx.Err(); err != nil {
					return result{}, err
				}
				continue
			}
			c.fail(err)
			return <-ch, nil // fail answered every waiting call
		}
		c.lastRecv.Store(time.Now().UnixNano())
		c.deliver(fid, result{payload: payload, status: st})
		if fid == id {
			return <-ch, nil
		}
	}
}

// ctxWatch is a context.AfterFunc on a reader's ctx.
type ctxWatch struct {
	done <-chan struct{} // the ctx's Done
	stop func() bool
}

// watchCtx makes the end of ctx (whose Done is done) wake the token
// holder's Read while it reads for ctx: its AfterFunc moves the read
// deadline into the past. A watch kept from an earlier call of the same
// ctx is reused. An AfterFunc that fires while nobody reads for its ctx
// does nothing (watchMu orders it against the end of each read).
func (c *Client) watchCtx(ctx context.Context, done <-chan struct{}) {
	w := c.watch.Load()
	if w == nil || w.done != done {
		nw := &ctxWatch{done: done}
		nw.stop = context.AfterFunc(ctx, func() {
			c.watchMu.Lock()
			defer c.watchMu.Unlock()
			if c.reading == nw {
				_ = c.conn.SetReadDeadline(aLongTimeAgo)
			}
		})
		if old := c.watch.Swap(nw); old != nil {
			old.stop()
		}
		if c.Err() != nil { // ended meanwhile: fail may have missed nw
			c.dropWatch()
		}
		w = nw
	}
	c.watchMu.Lock()
	c.reading = w
	c.watchMu.Unlock()
}

// unwatchCtx ends the read for ctx. The watch stays for the next call when
// ctx has no deadline and has not ended (a long-lived ctx), and is stopped
// otherwise (a ctx made for the call: it ends soon, and its AfterFunc need
// not run). A read deadline the end of ctx set is cleared for the next
// reader. Once it returns no wake-up of the watch moves the deadline: an
// idle connection never holds a deadline in the past (Alive's peek would
// take it for a failure).
func (c *Client) unwatchCtx(ctx context.Context) {
	c.watchMu.Lock()
	c.reading = nil
	c.watchMu.Unlock()
	_, timed := ctx.Deadline()
	ended := ctx.Err() != nil
	if timed || ended {
		c.dropWatch()
	}
	if ended {
		_ = c.conn.SetReadDeadline(time.Time{})
		c.rdl = time.Time{}
	}
}

// dropWatch stops the kept watch, so that a long-lived ctx does not keep
// an ended connection.
func (c *Client) dropWatch() {
	if w := c.watch.Swap(nil); w != nil {
		w.stop()
	}
}

// send queues a request's frame and, unless another caller is writing
// (it then sends this frame with its own, in the same write), writes the
// queued frames until none is left: concurrent calls share write system
// calls. An error means this frame did not leave; frames of other callers
// lost in a failed write fail their calls through fail (ErrConnLost).
func (c *Client) send(method uint8, id uint64, req []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.writing {
		c.wpend = appendFrame(c.wpend, method, id, req)
		return nil
	}
	c.wpend = appendFrame(c.wpend, method, id, req)
	c.writing = true
	defer func() { c.writing = false }()
	first := true
	for len(c.wpend) > 0 {
		buf := c.wpend
		c.wpend = c.wspare[:0]
		c.wmu.Unlock()
		_, err := c.io.Write(buf)
		c.wmu.Lock()
		c.wspare = buf[:0]
		if err != nil {
			// Before anyone else writes: a torn frame is never completed.
			c.fail(err)
			c.wpend = c.wpend[:0]
			if first {
				return err // this caller's frame was in it
			}
			return nil // this caller's frame left; fail answered it
		}
		first = false
	}
	return nil
}

// Call sends a request and waits for its answer or ctx's end.
func (c *Client) Call(ctx context.Context, method uint8, req []byte) ([]byte, error) {
	return c.CallBy(ctx, time.Time{}, method, req)
}

// CallBy is Call that also gives up when deadline (zero: none) passes,
// without a timer of its own (a context.WithDeadline per call was a tenth
// of a small store call's CPU): the caller reading the connection wakes
// at its deadline; a caller waiting for another's read to deliver its
// answer gives up at its ctx's end or, at the latest, when that reader's
// deadline passes and the read passes to it. A call that gives up at its
// deadline fails with an error wrapping context.DeadlineExceeded. req is
// copied before CallBy returns: the caller may reuse it.
func (c *Client) CallBy(ctx context.Context, deadline time.Time, method uint8, req []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	ch := chPool.Get().(chan result)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		chPool.Put(ch)
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()

	if err := c.send(method, id, req); err != nil {
		c.forget(id)
		return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	var r result
	select {
	case r = <-ch:
	case <-c.lead:
		var err error
		r, err = c.readUntil(ctx, id, ch, deadline)
		c.lead <- struct{}{}
		if err != nil {
			c.forget(id)
			return nil, err
		}
	case <-ctx.Done():
		c.forget(id)
		return nil, ctx.Err()
	}
	chPool.Put(ch) // its one answer was received
	if r.err != nil {
		return nil, r.err
	}
	if r.status == StatusUnauthenticated {
		return nil, fmt.Errorf("%w: %s", ErrUnauthenticated, r.payload)
	}
	if r.status != StatusOK {
		return nil, fmt.Errorf("%w: status %d: %s", ErrRemote, r.status, r.payload)
	}
	return r.payload, nil
}
