package testbed

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"time"
)

// The roles of the binary, started on a host with their readiness taken
// from the lines they print (never a sleep).

var (
	reMaster    = regexp.MustCompile(`master listening grpc=(\S+) http=(\S+)`)
	reCandidate = regexp.MustCompile(`master candidate .* http=(\S+)`)
	reStore     = regexp.MustCompile(`store node mounted segment=(\S+) .* http=(\S+)`)
	reServe     = regexp.MustCompile(`serving \S+ on (http://\S+)`)
	reBootstrap = regexp.MustCompile(`mooncake connector ready.* bootstrap=(\S+)`)
	reProxy     = regexp.MustCompile(`proxy listening on (http://\S+)`)
)

// Master is a running master.
type Master struct {
	*Proc
	GRPC string // host:port
	HTTP string // host:port ("" for an HA candidate that is not leading)
}

// StartMaster runs `mooncake master` on h (its own address, free ports).
func (h *Host) StartMaster(ctx context.Context, extra ...string) (*Master, error) {
	p, err := h.Start(ctx, append([]string{"master", "--host", h.Addr, "--port", "0", "--http-port", "0"}, extra...)...)
	if err != nil {
		return nil, err
	}
	m, err := p.WaitLine(ctx, reMaster)
	if err != nil {
		return nil, err
	}
	return &Master{Proc: p, GRPC: m[1], HTTP: m[2]}, nil
}

// StartHAMaster runs an HA master candidate on h, electing in etcd
// (host:port reachable from the bed, e.g. a Link to a loopback etcd); its
// gRPC port is fixed (port) because the leader advertises it.
func (h *Host) StartHAMaster(ctx context.Context, etcd string, port int, extra ...string) (*Master, error) {
	args := append([]string{"master", "--ha", "--etcd", etcd, "--host", h.Addr, "--advertise", h.Addr,
		"--port", fmt.Sprint(port), "--http-port", "0"}, extra...)
	p, err := h.Start(ctx, args...)
	if err != nil {
		return nil, err
	}
	m, err := p.WaitLine(ctx, reCandidate)
	if err != nil {
		return nil, err
	}
	return &Master{Proc: p, GRPC: fmt.Sprintf("%s:%d", h.Addr, port), HTTP: m[1]}, nil
}

// Store is a running storage node.
type Store struct {
	*Proc
	Segment string
	HTTP    string // host:port of /health and /metrics
}

// StartStore runs `mooncake store` on h contributing size (e.g. "64MiB").
func (h *Host) StartStore(ctx context.Context, master, size string, extra ...string) (*Store, error) {
	p, err := h.Start(ctx, append([]string{"store", "--master", master, "--host", h.Addr, "--segment-size", size, "--http-port", "0"}, extra...)...)
	if err != nil {
		return nil, err
	}
	m, err := p.WaitLine(ctx, reStore)
	if err != nil {
		return nil, err
	}
	return &Store{Proc: p, Segment: m[1], HTTP: m[2]}, nil
}

// Engine is a running `mooncake serve`.
type Engine struct {
	*Proc
	URL       string // http://host:port
	Bootstrap string // producer: its bootstrap registry host:port
}

// Spec is the engine as a proxy --prefill/--decode argument.
func (e *Engine) Spec() string {
	if e.Bootstrap != "" {
		return e.URL + ",bootstrap=" + e.Bootstrap
	}
	return e.URL
}

// StartServe runs `mooncake serve --model tiny --role role` on h. A
// producer gets a free bootstrap port unless extra says otherwise.
func (h *Host) StartServe(ctx context.Context, role string, extra ...string) (*Engine, error) {
	args := []string{"serve", "--host", h.Addr, "--port", "0", "--model", "tiny", "--role", role}
	if role == "producer" {
		args = append(args, "--bootstrap-port", "0")
	}
	p, err := h.Start(ctx, append(args, extra...)...)
	if err != nil {
		return nil, err
	}
	e := &Engine{Proc: p}
	if role == "producer" {
		m, err := p.WaitLine(ctx, reBootstrap)
		if err != nil {
			return nil, err
		}
		e.Bootstrap = m[1]
	}
	m, err := p.WaitLine(ctx, reServe)
	if err != nil {
		return nil, err
	}
	e.URL = m[1]
	return e, WaitHealthy(ctx, e.URL)
}

// Proxy is a running P/D proxy.
type Proxy struct {
	*Proc
	URL string
}

// StartProxy runs `mooncake proxy` on h with the given --prefill and
// --decode specs.
func (h *Host) StartProxy(ctx context.Context, prefill, decode []string, extra ...string) (*Proxy, error) {
	args := []string{"proxy", "--host", h.Addr, "--port", "0"}
	for _, s := range prefill {
		args = append(args, "--prefill", s)
	}
	for _, s := range decode {
		args = append(args, "--decode", s)
	}
	p, err := h.Start(ctx, append(args, extra...)...)
	if err != nil {
		return nil, err
	}
	m, err := p.WaitLine(ctx, reProxy)
	if err != nil {
		return nil, err
	}
	return &Proxy{Proc: p, URL: m[1]}, WaitHealthy(ctx, m[1])
}

// WaitHealthy polls url/health until it answers 200 or ctx ends.
func WaitHealthy(ctx context.Context, url string) error {
	c := http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := c.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s/health: %w (last: %v)", url, ctx.Err(), err)
		case <-tick.C:
		}
	}
}
