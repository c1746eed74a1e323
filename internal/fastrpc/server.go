package fastrpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"
)

// Handler answers one request: the response payload and its status
// (StatusOK, or StatusUnknownMethod / StatusBadRequest with a message).
// It runs on the connection's reader goroutine, so it should not block.
// payload is valid only during the call (it is a view of the connection's
// read buffer): a handler keeps a copy of what it keeps.
type Handler func(method uint8, payload []byte) (resp []byte, status uint8)

// Authenticator decides a connection's handler from its credential frame
// (MethodHello's payload; nil when the first frame is not one). conn is the
// connection as accepted (a *tls.Conn on a TLS listener: its
// ConnectionState carries the client certificate of mutual TLS). An error
// is answered StatusUnauthenticated with its text and ends the connection.
type Authenticator func(conn net.Conn, credential []byte) (Handler, error)

// sniffTimeout bounds how long a new connection may take to send its
// first bytes before it is handed to gRPC as is.
const sniffTimeout = 10 * time.Second

// Mux splits a listener between gRPC and fastrpc connections. NewMux
// starts nothing; Run accepts and serves until its context ends.
type Mux struct {
	ln    net.Listener
	grpc  *subListener
	mu    sync.Mutex
	conns map[net.Conn]struct{} // open fastrpc connections
	wg    sync.WaitGroup
	auth  Authenticator
}

// SetAuthenticator makes every fastrpc connection present a credential
// frame first, and serves it with the handler auth returns instead of
// Run's. Call it before Run.
func (m *Mux) SetAuthenticator(auth Authenticator) { m.auth = auth }

// NewMux wraps ln. Serve gRPC on GRPC() and call Run.
func NewMux(ln net.Listener) *Mux {
	return &Mux{ln: ln, grpc: &subListener{addr: ln.Addr(), conns: make(chan net.Conn), done: make(chan struct{})},
		conns: map[net.Conn]struct{}{}}
}

// NewLocalMux wraps a listener of fastrpc connections only (ListenLocal's):
// a connection that does not start with Preface is closed. GRPC returns nil.
func NewLocalMux(ln net.Listener) *Mux {
	return &Mux{ln: ln, conns: map[net.Conn]struct{}{}}
}

// GRPC is the listener of the connections that are not fastrpc ones.
// Closing it does not close the underlying listener.
func (m *Mux) GRPC() net.Listener {
	if m.grpc == nil {
		return nil
	}
	return m.grpc
}

// localPrefix starts the name of a server's same-host listener.
const localPrefix = "@mooncake-fastrpc/"

// LocalName is the Linux abstract unix socket name of the same-host
// listener of the server whose TCP listener is at addr ("host:port",
// exactly as bound). Dial(addr) tries it first.
func LocalName(addr string) string { return localPrefix + addr }

// ListenLocal listens on LocalName(addr), a Linux abstract unix socket:
// same-host clients reach the server there at about half the system-call
// cost of loopback TCP. It fails off Linux or when the name is taken; the
// server then serves TCP only. An abstract socket leaves nothing on disk
// and its name is freed when the listener closes.
func ListenLocal(addr string) (net.Listener, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("fastrpc: no abstract unix sockets on %s", runtime.GOOS)
	}
	ln, err := net.Listen("unix", LocalName(addr))
	if err != nil {
		return nil, fmt.Errorf("fastrpc: listen local %s: %w", addr, err)
	}
	return ln, nil
}

// Run accepts connections until ctx ends or the listener fails, serving
// fastrpc connections with h and passing the others to GRPC(). It closes
// the listener and every fastrpc connection, and returns once its
// goroutines have ended: nil when ctx ended or the listener was closed.
func (m *Mux) Run(ctx context.Context, h Handler) error {
	stop := context.AfterFunc(ctx, func() { _ = m.ln.Close() })
	defer stop()
	defer m.wg.Wait()
	defer m.closeConns()
	if m.grpc != nil {
		defer m.grpc.Close()
	}
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("fastrpc: accept: %w", err)
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c, h)
		}()
	}
}

func (m *Mux) closeConns() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for c := range m.conns {
		_ = c.Close()
	}
	m.conns = nil
}

// route reads the first bytes of c and serves it or hands it to gRPC.
func (m *Mux) route(c net.Conn, h Handler) {
	var r *bufio.Reader
	if m.grpc == nil { // a local listener: fastrpc only, over the socket or pipes
		sc := acceptPreface(c)
		if sc == nil {
			_ = c.Close()
			return
		}
		if _, pipes := sc.(*pipeConn); !pipes {
			if _, err := c.Write([]byte(Preface)); err != nil {
				_ = c.Close()
				return
			}
		}
		c, r = sc, bufio.NewReaderSize(newRawIO(sc), 64<<10)
	} else {
		r = bufio.NewReaderSize(newRawIO(c), 64<<10)
		_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
		head, _ := r.Peek(len(Preface))
		_ = c.SetReadDeadline(time.Time{})
		if string(head) != Preface {
			select {
			case m.grpc.conns <- &bufferedConn{Conn: c, r: r}:
			case <-m.grpc.done:
				_ = c.Close()
			}
			return
		}
		_, _ = r.Discard(len(Preface))
		if _, err := c.Write([]byte(Preface)); err != nil { // tells the client this is a fastrpc server
			_ = c.Close()
			return
		}
	}
	m.mu.Lock()
	if m.conns == nil { // shutting down
		m.mu.Unlock()
		_ = c.Close()
		return
	}
	m.conns[c] = struct{}{}
	m.mu.Unlock()
	if ch, ok := m.authenticate(c, r, h); ok {
		serveConn(c, r, ch)
	}
	m.mu.Lock()
	delete(m.conns, c)
	m.mu.Unlock()
	_ = c.Close()
}

// authenticate reads the credential frame of a connection when the Mux has
// an Authenticator, and returns the connection's handler; false when the
// connection must end. Without an Authenticator it returns h.
func (m *Mux) authenticate(c net.Conn, r *bufio.Reader, h Handler) (Handler, bool) {
	if m.auth == nil {
		return h, true
	}
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	var big []byte
	method, id, payload, used, err := readFrameView(r, &big)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, false
	}
	var cred []byte
	if method == MethodHello {
		cred = payload
	}
	ch, aerr := m.auth(netConnOf(c), cred)
	st, resp := uint8(StatusOK), []byte(nil)
	switch {
	case aerr != nil:
		st, resp = StatusUnauthenticated, []byte(aerr.Error())
	case method != MethodHello: // a first request without a credential, which the Authenticator let in: served
		resp, st = ch(method, payload)
	}
	if _, err := r.Discard(used); err != nil {
		return nil, false
	}
	hdr := frameHeader(st, id, len(resp))
	if _, err := c.Write(append(hdr[:], resp...)); err != nil || aerr != nil || st == StatusUnauthenticated {
		return nil, false
	}
	return ch, true
}

// netConnOf unwraps a connection Mux buffered.
func netConnOf(c net.Conn) net.Conn {
	if b, ok := c.(*bufferedConn); ok {
		return b.Conn
	}
	return c
}

// NetConn is the connection as accepted (for a gRPC server's credentials:
// the *tls.Conn of a TLS listener).
func (b *bufferedConn) NetConn() net.Conn { return b.Conn }

// serveConn answers c's requests in order until it fails or closes.
// Answers are flushed when no whole request is left in the read buffer,
// so the answers to pipelined requests leave together.
func serveConn(c net.Conn, r *bufio.Reader, h Handler) {
	w := bufio.NewWriterSize(newRawIO(c), 64<<10)
	var big []byte // payloads larger than r's buffer
	var hdr [headerLen]byte
	for {
		method, id, payload, used, err := readFrameView(r, &big)
		if err != nil {
			return
		}
		var resp []byte
		var st uint8
		if method == MethodHello { // a credential frame to a server without an Authenticator
			st = StatusOK
		} else {
			resp, st = h(method, payload)
		}
		if _, err := r.Discard(used); err != nil {
			return
		}
		if cap(big) > 1<<20 { // do not keep a large frame's buffer
			big = nil
		}
		hdr = frameHeader(st, id, len(resp))
		if _, err := w.Write(hdr[:]); err != nil {
			return
		}
		if _, err := w.Write(resp); err != nil {
			return
		}
		if st == StatusUnauthenticated { // the credential no longer holds: answer and end
			_ = w.Flush()
			return
		}
		if !wholeFrameBuffered(r) {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// wholeFrameBuffered reports whether r holds a whole frame already.
func wholeFrameBuffered(r *bufio.Reader) bool {
	n := r.Buffered()
	if n < headerLen {
		return false
	}
	h, err := r.Peek(4)
	if err != nil {
		return false
	}
	return uint64(n) >= 4+uint64(binary.LittleEndian.Uint32(h))
}

// bufferedConn is a connection whose first bytes were read into r.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// subListener hands out the connections Mux routes to it.
type subListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *subListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *subListener) Addr() net.Addr { return l.addr }
