// Package httpserve runs an http.Handler on a listener for the lifetime of a
// context: the one shutdown sequence shared by the project's small HTTP
// servers (proxy, bootstrap registry, metadata server).
//
// Serve returns when the listener fails (with that error) or when ctx ends;
// in the second case it shuts the server down gracefully within grace, then
// closes what is left, and returns nil only after the serving goroutine has
// exited, so no goroutine outlives the call.
//
// Addr reports a listener's address for a server's Addr/HTTPAddr accessors
// ("" when it has none).
package httpserve

import (
	"context"
	"net"
	"net/http"
	"time"
)

// ReadHeaderTimeout bounds how long a client may take to send request headers.
const ReadHeaderTimeout = 10 * time.Second

// Serve serves h on ln until ctx ends, then shuts down within grace.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
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
