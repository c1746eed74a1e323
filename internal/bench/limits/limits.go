package limits

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Memcpy returns single-thread copy bandwidth in GB/s: span bytes (rounded
// down to whole blocks, at least one) copied in block-size chunks, pass after
// pass for at least d (at least one timed pass), after one untimed warm-up
// pass. block <= 0 or block > span copies span bytes at once.
func Memcpy(span, block int, d time.Duration) float64 {
	span = max(span, 1)
	if block <= 0 || block > span {
		block = span
	}
	span = span / block * block
	src := make([]byte, span)
	dst := make([]byte, span)
	for i := range src {
		src[i] = byte(i)
	}
	pass := func() int64 {
		for off := 0; off+block <= span; off += block {
			copy(dst[off:off+block], src[off:off+block])
		}
		return int64(span)
	}
	pass() // warm-up: fault in dst
	var n int64
	start := time.Now()
	for n == 0 || time.Since(start) < d {
		n += pass()
	}
	return float64(n) / time.Since(start).Seconds() / 1e9
}

// Sink is a loopback TCP listener that reads and discards block-size
// buffers on every connection it accepts: the far end of RawTCP.
type Sink struct {
	ln net.Listener
	wg sync.WaitGroup
}

// ListenSink binds 127.0.0.1 on a free port and serves connections, reading
// block bytes at a time, until Close.
func ListenSink(block int) (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("limits: sink: %w", err)
	}
	s := &Sink{ln: ln}
	s.wg.Add(1)
	go s.serve(max(block, 1))
	return s, nil
}

// Addr is the sink's host:port.
func (s *Sink) Addr() string { return s.ln.Addr().String() }

// Close stops accepting and waits for the open connections to end (their
// writers closing them).
func (s *Sink) Close() error {
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *Sink) serve(block int) {
	defer s.wg.Done()
	var cw sync.WaitGroup
	defer cw.Wait()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		cw.Add(1)
		go func() {
			defer cw.Done()
			defer c.Close()
			buf := make([]byte, block)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
			}
		}()
	}
}

// RawTCP measures one loopback TCP connection writing block-size buffers to
// the sink at addr for d, in GB/s. addr "" runs a Sink of this process for
// the measurement.
func RawTCP(ctx context.Context, addr string, block int, d time.Duration) (float64, error) {
	if addr == "" {
		s, err := ListenSink(block)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		addr = s.Addr()
	}
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("limits: raw tcp dial: %w", err)
	}
	defer c.Close()
	buf := make([]byte, block)
	var n int64
	start := time.Now()
	for time.Since(start) < d {
		m, err := c.Write(buf)
		n += int64(m)
		if err != nil {
			return 0, fmt.Errorf("limits: raw tcp: %w", err)
		}
	}
	return float64(n) / time.Since(start).Seconds() / 1e9, nil
}
