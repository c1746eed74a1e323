package metadata

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvcache-go/mooncake/internal/httpserve"
)

// ErrNotFound: the key is absent.
var ErrNotFound = errors.New("metadata: key not found")

// MaxValue bounds a stored value (a segment descriptor with many buffers).
const MaxValue = 64 << 20

// Store is a metadata backend.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, val []byte) error
	Delete(ctx context.Context, key string) error
	Close() error
}

var (
	_ Store = (*HTTPClient)(nil)
	_ Store = (*EtcdClient)(nil)
)

// Open connects to the store named by uri (http://... or etcd://...).
func Open(ctx context.Context, uri string) (Store, error) {
	switch {
	case strings.HasPrefix(uri, "http://"):
		return NewHTTPClient(uri), nil
	case strings.HasPrefix(uri, "etcd://"):
		return DialEtcd(ctx, strings.Split(strings.TrimPrefix(uri, "etcd://"), ","))
	}
	return nil, fmt.Errorf("metadata: unsupported uri %q", uri)
}

// Server is Mooncake's HTTP metadata server, in memory.
type Server struct {
	mu  sync.RWMutex
	kv  map[string][]byte
	log *slog.Logger
}

// NewServer returns an empty metadata server.
func NewServer(log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{kv: map[string][]byte{}, log: log}
}

// ServeHTTP implements GET/PUT/DELETE /metadata?key= and GET /health
// ("OK", as Mooncake's metadata server answers).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" && r.Method == http.MethodGet {
		_, _ = io.WriteString(w, "OK")
		return
	}
	if r.URL.Path != "/metadata" {
		http.NotFound(w, r)
		return
	}
	key := r.URL.Query().Get("key")
	if key == "" {
		http.Error(w, "missing key", http.StatusBadRequest)
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.mu.RLock()
		v, ok := s.kv[key]
		s.mu.RUnlock()
		if !ok {
			http.Error(w, "metadata not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(v)
	case http.MethodPut:
		v, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxValue))
		if err != nil {
			http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		s.mu.Lock()
		s.kv[key] = v
		s.mu.Unlock()
		s.log.Debug("metadata put", "key", key, "bytes", len(v))
		_, _ = io.WriteString(w, "metadata updated")
	case http.MethodDelete:
		s.mu.Lock()
		_, ok := s.kv[key]
		delete(s.kv, key)
		s.mu.Unlock()
		if !ok {
			http.Error(w, "metadata not found", http.StatusNotFound)
			return
		}
		s.log.Debug("metadata delete", "key", key)
		_, _ = io.WriteString(w, "metadata deleted")
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// Serve runs the server on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return httpserve.Serve(ctx, ln, s, 5*time.Second)
}

// HTTPClient talks to an HTTP metadata server.
type HTTPClient struct {
	base string
	c    *http.Client
	tr   *http.Transport
}

// NewHTTPClient returns a client for base (e.g. http://127.0.0.1:8080/metadata).
func NewHTTPClient(base string) *HTTPClient {
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: 1500 * time.Millisecond}).DialContext, MaxIdleConnsPerHost: 4}
	return &HTTPClient{base: base, tr: tr, c: &http.Client{Timeout: 3 * time.Second, Transport: tr}}
}

func (h *HTTPClient) do(ctx context.Context, method, key string, body []byte) ([]byte, error) {
	u := h.base + "?key=" + url.QueryEscape(key)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	resp, err := h.c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metadata: %s %s: %w", method, key, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxValue+1))
	if err != nil {
		return nil, fmt.Errorf("metadata: %s %s: %w", method, key, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("metadata: %s %s: HTTP %d", method, key, resp.StatusCode)
	case len(b) > MaxValue:
		return nil, fmt.Errorf("metadata: %s: value too large", key)
	}
	return b, nil
}

// Get reads key.
func (h *HTTPClient) Get(ctx context.Context, key string) ([]byte, error) {
	return h.do(ctx, http.MethodGet, key, nil)
}

// Put writes key.
func (h *HTTPClient) Put(ctx context.Context, key string, val []byte) error {
	if val == nil {
		val = []byte{}
	}
	_, err := h.do(ctx, http.MethodPut, key, val)
	return err
}

// Delete removes key (ErrNotFound if absent).
func (h *HTTPClient) Delete(ctx context.Context, key string) error {
	_, err := h.do(ctx, http.MethodDelete, key, nil)
	return err
}

// Close drops idle connections.
func (h *HTTPClient) Close() error { h.tr.CloseIdleConnections(); return nil }

// EtcdClient stores keys in etcd.
type EtcdClient struct{ c *clientv3.Client }

// DialEtcd connects to etcd endpoints (host:port).
func DialEtcd(ctx context.Context, endpoints []string) (*EtcdClient, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second, Context: context.WithoutCancel(ctx)})
	if err != nil {
		return nil, fmt.Errorf("metadata: etcd %v: %w", endpoints, err)
	}
	return &EtcdClient{c: c}, nil
}

func etcdCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, 3*time.Second)
}

// Get reads key.
func (e *EtcdClient) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := etcdCtx(ctx)
	defer cancel()
	r, err := e.c.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("metadata: etcd get %s: %w", key, err)
	}
	if len(r.Kvs) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return r.Kvs[0].Value, nil
}

// Put writes key.
func (e *EtcdClient) Put(ctx context.Context, key string, val []byte) error {
	ctx, cancel := etcdCtx(ctx)
	defer cancel()
	if _, err := e.c.Put(ctx, key, string(val)); err != nil {
		return fmt.Errorf("metadata: etcd put %s: %w", key, err)
	}
	return nil
}

// Delete removes key (ErrNotFound if absent).
func (e *EtcdClient) Delete(ctx context.Context, key string) error {
	ctx, cancel := etcdCtx(ctx)
	defer cancel()
	r, err := e.c.Delete(ctx, key)
	if err != nil {
		return fmt.Errorf("metadata: etcd delete %s: %w", key, err)
	}
	if r.Deleted == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return nil
}

// Close closes the etcd client.
func (e *EtcdClient) Close() error { return e.c.Close() }
