package dummyclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/kvcache-go/mooncake/store"
)

// memStore is a Backend in a map.
type memStore struct {
	mu   sync.Mutex
	m    map[string][]byte
	regs int
}

func (s *memStore) PutWith(_ context.Context, key string, v []byte, o store.PutOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; ok && !o.Upsert {
		return store.ErrExists
	}
	s.m[key] = bytes.Clone(v)
	return nil
}
func (s *memStore) PutFrom(ctx context.Context, key string, v []byte, o store.PutOptions) error {
	return s.PutWith(ctx, key, v, o)
}
func (s *memStore) Get(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return nil, fmt.Errorf("get %q: %w", key, store.ErrNotFound)
	}
	return bytes.Clone(v), nil
}
func (s *memStore) GetInto(ctx context.Context, key string, dst []byte) (int, error) {
	v, err := s.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(v) > len(dst) {
		return 0, store.ErrBufferTooSmall
	}
	return copy(dst, v), nil
}
func (s *memStore) Exist(ctx context.Context, key string) (bool, error) {
	_, err := s.Get(ctx, key)
	return err == nil, nil
}
func (s *memStore) BatchExist(ctx context.Context, keys []string) ([]bool, error) {
	out := make([]bool, len(keys))
	for i, k := range keys {
		out[i], _ = s.Exist(ctx, k)
	}
	return out, nil
}
func (s *memStore) Stat(ctx context.Context, key string) (store.ObjectInfo, error) {
	v, err := s.Get(ctx, key)
	return store.ObjectInfo{Key: key, Size: uint64(len(v))}, err
}
func (s *memStore) Remove(_ context.Context, key string, _ bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; !ok {
		return store.ErrNotFound
	}
	delete(s.m, key)
	return nil
}
func (s *memStore) BatchRemove(ctx context.Context, keys []string, force bool) []error {
	out := make([]error, len(keys))
	for i, k := range keys {
		out[i] = s.Remove(ctx, k, force)
	}
	return out
}
func (s *memStore) RemoveByRegex(context.Context, string, bool) (int, error) {
	return 0, store.ErrInvalid
}
func (s *memStore) RemoveAll(context.Context, bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.m)
	s.m = map[string][]byte{}
	return n, nil
}
func (s *memStore) List(_ context.Context, prefix, _ string, _ int) ([]store.KeyInfo, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.KeyInfo
	for k, v := range s.m {
		if strings.HasPrefix(k, prefix) {
			out = append(out, store.KeyInfo{Key: k, Size: uint64(len(v))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, "", nil
}
func (s *memStore) RegisterBuffer([]byte) error   { s.mu.Lock(); s.regs++; s.mu.Unlock(); return nil }
func (s *memStore) UnregisterBuffer([]byte) error { s.mu.Lock(); s.regs--; s.mu.Unlock(); return nil }
func (s *memStore) SegmentName() string           { return "127.0.0.1:1234" }

func start(t *testing.T) (*memStore, string) {
	t.Helper()
	return startWith(t, Config{})
}

// startWith serves a memStore with cfg (its Addr and Store set here).
func startWith(t *testing.T, cfg Config) (*memStore, string) {
	t.Helper()
	ms := &memStore{m: map[string][]byte{}}
	addr := fmt.Sprintf("test-%s-%d", t.Name(), len(cfg.AllowUIDs))
	cfg.Addr, cfg.Store = addr, ms
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ms, addr
}

func TestDummyPutGetThroughPoolAndInline(t *testing.T) {
	ms, addr := start(t)
	ctx := context.Background()
	c, err := Dial(ctx, addr, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.SegmentName() != "127.0.0.1:1234" {
		t.Fatalf("segment %q", c.SegmentName())
	}
	buf := c.Alloc(4096)
	if buf == nil || c.Alloc(2<<20) != nil {
		t.Fatal("Alloc")
	}
	copy(buf, "pooled value")
	if err := c.PutFrom(ctx, "a", buf[:12], store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.PutWith(ctx, "b", []byte("inline"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.PutWith(ctx, "b", []byte("x"), store.PutOptions{}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second put: %v", err)
	}
	dst := c.Alloc(64)
	if n, err := c.GetInto(ctx, "b", dst); err != nil || string(dst[:n]) != "inline" {
		t.Fatalf("GetInto pool: %d %v", n, err)
	}
	local := make([]byte, 64)
	if n, err := c.GetInto(ctx, "a", local); err != nil || string(local[:n]) != "pooled value" {
		t.Fatalf("GetInto local: %d %v", n, err)
	}
	if _, err := c.GetInto(ctx, "a", local[:3]); !errors.Is(err, store.ErrBufferTooSmall) {
		t.Fatalf("small buffer: %v", err)
	}
	if _, err := c.Get(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if ok, err := c.BatchExist(ctx, []string{"a", "z"}); err != nil || !ok[0] || ok[1] {
		t.Fatalf("BatchExist %v %v", ok, err)
	}
	if info, err := c.Stat(ctx, "a"); err != nil || info.Size != 12 {
		t.Fatalf("Stat %+v %v", info, err)
	}
	if l, _, err := c.List(ctx, "", "", 10); err != nil || len(l) != 2 {
		t.Fatalf("List %v %v", l, err)
	}
	errs := c.BatchRemove(ctx, []string{"a", "z"}, false)
	if errs[0] != nil || !errors.Is(errs[1], store.ErrNotFound) {
		t.Fatalf("BatchRemove %v", errs)
	}
	if n, err := c.RemoveAll(ctx, true); err != nil || n != 1 {
		t.Fatalf("RemoveAll %d %v", n, err)
	}
	ms.mu.Lock()
	regs := ms.regs
	ms.mu.Unlock()
	if regs != 1 {
		t.Fatalf("pool registrations %d", regs)
	}
}

func TestTwoDummiesShareTheStore(t *testing.T) {
	_, addr := start(t)
	ctx := context.Background()
	a, err := Dial(ctx, addr, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Dial(ctx, addr, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if err := a.PutWith(ctx, fmt.Sprint("k", i), []byte(fmt.Sprint("v", i)), store.PutOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range 8 {
		if v, err := b.Get(ctx, fmt.Sprint("k", i)); err != nil || string(v) != fmt.Sprint("v", i) {
			t.Fatalf("b.Get: %q %v", v, err)
		}
	}
}

func TestDialErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Dial(ctx, "nobody-serves-this", 4096); !errors.Is(err, ErrNoRealClient) {
		t.Fatalf("no server: %v", err)
	}
	_, addr := start(t)
	if _, err := Dial(ctx, addr, 1<<50); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("huge pool: %v", err)
	}
	c, err := Dial(ctx, addr, 4096)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if _, err := c.Get(ctx, "a"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}
