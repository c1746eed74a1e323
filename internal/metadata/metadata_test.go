package metadata

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func startHTTP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = NewServer(nil).Serve(ctx, ln)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return "http://" + ln.Addr().String() + "/metadata"
}

// storeSuite is the behaviour every Store must have.
func storeSuite(t *testing.T, s Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := "mooncake/ram/127.0.0.1:12345"
	if _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get absent: %v", err)
	}
	if err := s.Delete(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete absent: %v", err)
	}
	for _, v := range []string{`{"name":"a"}`, `{"name":"b"}`, ""} {
		if err := s.Put(ctx, key, []byte(v)); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, key)
		if err != nil || string(got) != v {
			t.Fatalf("get = %q, %v; want %q", got, err, v)
		}
	}
	odd := "mooncake/ram/a b&c=d?e/ü"
	if err := s.Put(ctx, odd, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, odd); err != nil || string(got) != "x" {
		t.Fatalf("odd key: %q %v", got, err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}

func TestHTTPStore(t *testing.T) {
	base := startHTTP(t)
	c, err := Open(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	storeSuite(t, c)
}

func TestHTTPContract(t *testing.T) {
	base := startHTTP(t)
	root := strings.TrimSuffix(base, "/metadata")
	do := func(method, url, body string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cases := []struct {
		method, url, body string
		code              int
		want              string
	}{
		{"GET", base + "?key=k", "", 404, ""},
		{"PUT", base + "?key=k", "v1", 200, ""},
		{"GET", base + "?key=k", "", 200, "v1"},
		{"POST", base + "?key=k", "", 405, ""},
		{"GET", base, "", 400, ""},
		{"GET", root + "/other?key=k", "", 404, ""},
		{"DELETE", base + "?key=k", "", 200, ""},
		{"DELETE", base + "?key=k", "", 404, ""},
	}
	for _, c := range cases {
		code, body := do(c.method, c.url, c.body)
		if code != c.code || (c.want != "" && body != c.want) {
			t.Fatalf("%s %s: %d %q, want %d %q", c.method, c.url, code, body, c.code, c.want)
		}
	}
	// The client reports a dead server as an error, not a hang.
	dead := NewHTTPClient("http://127.0.0.1:1/metadata")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := dead.Get(ctx, "k"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("dead server: %v", err)
	}
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// StartEtcd runs an embedded single-node etcd on free loopback ports and
// returns its client endpoint.
func startEtcd(t *testing.T) string { return StartEtcdForTest(t) }

// StartEtcdForTest starts an embedded etcd (exported to the external test package).
func StartEtcdForTest(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	cp, pp := freePort(t), freePort(t)
	cu := mustURL(t, fmt.Sprintf("http://127.0.0.1:%d", cp))
	pu := mustURL(t, fmt.Sprintf("http://127.0.0.1:%d", pp))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []urlT{cu}, []urlT{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []urlT{pu}, []urlT{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("embedded etcd not ready")
	}
	return fmt.Sprintf("127.0.0.1:%d", cp)
}

func TestEtcdStore(t *testing.T) {
	ep := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Open(ctx, "etcd://"+ep)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storeSuite(t, s)
}
