package disktier

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Server is an open tier with its read server: what a storage node or a
// store client that contributes a segment runs next to its store client.
type Server struct {
	*Tier
	hs   *http.Server
	done chan struct{}
}

// Listen listens on addr ("host:0" picks a port), opens the tier with the
// listener's URL and serves its reads (Handler) until Close.
func Listen(cfg Config, addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("disktier: listen %s: %w", addr, err)
	}
	cfg.URL = "http://" + ln.Addr().String()
	t, err := Open(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{Tier: t, hs: &http.Server{Handler: t.Handler(), ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.hs.Serve(ln)
	}()
	return s, nil
}

// Close stops serving reads (in-flight ones are cut), waits for the server
// goroutine and releases the directory.
func (s *Server) Close() error {
	err := s.hs.Close()
	<-s.done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, s.Tier.Close())
}
