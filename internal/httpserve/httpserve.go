// Package httpserve runs an http.Handler on a listener for the lifetime of a
// context: the one shutdown sequence shared by every HTTP server of the
// project (proxy, engine server, master admin, HA candidate, storage node,
// bootstrap registry, metadata server).
//
// Serve returns when the listener fails (with that error) or when ctx ends;
// in the second case it shuts the server down gracefully within grace, then
// closes what is left, and returns nil only after the serving goroutine has
// exited, so no goroutine outlives the call.
//
// A server whose shutdown has its own order (the engine server stops its
// engine first) makes its http.Server with NewServer and stops it with
// Server.Shutdown, the same sequence Serve uses. http.Server.Shutdown alone
// counts a connection that was opened and has sent no request yet
// (StateNew: a health checker's or a pooling client's spare connection) as
// busy until it is 5 s old, so a shutdown could take 5 s for nothing;
// Server.Shutdown closes those at once, and waits for requests in flight
// as http.Server.Shutdown does.
//
// Addr reports a listener's address for a server's Addr/HTTPAddr accessors
// ("" when it has none).
package httpserve

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// ReadHeaderTimeout bounds how long a client may take to send request headers.
const ReadHeaderTimeout = 10 * time.Second

// Server is an http.Server whose Shutdown does not wait for connections
// that have not sent a request. Make it with NewServer (its ConnState hook
// is what Shutdown relies on: do not replace it).
type Server struct {
	http.Server

	mu      sync.Mutex
	fresh   map[net.Conn]struct{} // in StateNew: accepted, no request yet
	closing bool
}

// NewServer returns a Server for h with ReadHeaderTimeout set; set other
// http.Server fields (ErrorLog) before Serve.
func NewServer(h http.Handler) *Server {
	s := &Server{fresh: map[net.Conn]struct{}{}}
	s.Handler, s.ReadHeaderTimeout = h, ReadHeaderTimeout
	s.ConnState = s.connState
	return s
}

func (s *Server) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case st == http.StateNew && s.closing:
		c.Close() // accepted while shutting down: it would only wait
	case st == http.StateNew:
		s.fresh[c] = struct{}{}
	default:
		delete(s.fresh, c)
	}
}

// Shutdown stops the server: it closes the listeners, the idle connections
// and those that have sent no request, and waits for the requests in
// flight until ctx ends; then it closes whatever is left and returns ctx's
// error (nil when everything ended in time).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for c := range s.fresh {
		c.Close()
	}
	clear(s.fresh)
	s.mu.Unlock()
	if err := s.Server.Shutdown(ctx); err != nil {
		s.Close()
		return err
	}
	return nil
}

// Serve serves h on ln until ctx ends, then shuts down within grace.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	srv := NewServer(h)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-errc
	return nil
}

// Addr is ln's address, or "" for a nil listener (a server that is not
// listening, or not yet).
func Addr(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}
