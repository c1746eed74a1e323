package fastrpc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvcache-go/mooncake/internal/tlsconf"
	"github.com/kvcache-go/mooncake/internal/tlsconf/tlstest"
)

// startAuthMux serves echo behind an Authenticator that takes the
// credential "good" (and, on TLS, a client certificate named "cert-ok"),
// on a TLS listener when srvTLS is set. revoked, once true, makes the
// handler of authenticated connections refuse their next request.
func startAuthMux(t *testing.T, srvTLS *tls.Config, revoked *atomic.Bool) (addr string, stop func()) {
	t.Helper()
	var ln net.Listener
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	if srvTLS != nil {
		ln = tls.NewListener(ln, srvTLS)
	}
	m := NewMux(ln)
	m.SetAuthenticator(func(c net.Conn, cred []byte) (Handler, error) {
		ok := string(cred) == "good"
		if tc, isTLS := c.(*tls.Conn); isTLS {
			for _, n := range tlsconf.Names(tc.ConnectionState()) {
				ok = ok || n == "cert-ok"
			}
		}
		if !ok {
			return nil, fmt.Errorf("credential %q refused", cred)
		}
		return func(method uint8, p []byte) ([]byte, uint8) {
			if revoked != nil && revoked.Load() {
				return []byte("credential revoked"), StatusUnauthenticated
			}
			return echo(method, p)
		}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := m.Run(ctx, echo); err != nil {
			t.Error(err)
		}
	})
	wg.Go(func() {
		for {
			c, err := m.GRPC().Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	})
	return addr, func() { cancel(); wg.Wait() }
}

func TestAuthenticatedConnections(t *testing.T) {
	var revoked atomic.Bool
	addr, stop := startAuthMux(t, nil, &revoked)
	defer stop()
	ctx := context.Background()
	for name, cred := range map[string][]byte{"no credential": nil, "wrong": []byte("bad"), "empty": {}} {
		c, err := DialWith(ctx, addr, DialOptions{Credential: cred})
		if cred == nil {
			// Without a credential frame the dial succeeds (the preface is
			// fine); the first call is refused and ends the connection.
			if err != nil {
				t.Fatalf("%s: dial %v", name, err)
			}
			if _, err := c.Call(ctx, 1, []byte("x")); !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("%s: call %v, want ErrUnauthenticated", name, err)
			}
			_ = c.Close()
			continue
		}
		if !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("%s: dial %v, want ErrUnauthenticated", name, err)
		}
	}
	c, err := DialWith(ctx, addr, DialOptions{Credential: []byte("good")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Call(ctx, 1, []byte("abc")); err != nil || string(got) != "cba" {
		t.Fatalf("call %q %v", got, err)
	}
	revoked.Store(true)
	if _, err := c.Call(ctx, 1, []byte("abc")); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("after revocation: %v", err)
	}
	if _, err := c.Call(ctx, 1, []byte("abc")); err == nil {
		t.Fatal("a revoked connection still serves")
	}
}

// TestCredentialToPlainServer: a client with a credential works against a
// server that has no Authenticator (the frame is ignored).
func TestCredentialToPlainServer(t *testing.T) {
	addr, stop := startMux(t)
	defer stop()
	c, err := DialWith(context.Background(), addr, DialOptions{Credential: []byte("anything")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Call(context.Background(), 1, []byte("ab")); err != nil || string(got) != "ba" {
		t.Fatalf("call %q %v", got, err)
	}
}

func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "test")
	srvCert, srvKey := ca.Issue("master")
	srv, err := tlsconf.Server(tlsconf.Files{Cert: srvCert, Key: srvKey, CA: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startAuthMux(t, srv, nil)
	defer stop()
	ctx := context.Background()

	// A client trusting the CA, with a token.
	cli, err := tlsconf.Client(tlsconf.Files{CA: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	c, err := DialWith(ctx, addr, DialOptions{TLS: cli, Credential: []byte("good")})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{7, 8}, 1<<17)
	if got, err := c.Call(ctx, 1, big); err != nil || len(got) != len(big) || got[0] != 8 {
		t.Fatalf("call over TLS: %d %v", len(got), err)
	}
	_ = c.Close()

	// mTLS: a client certificate named cert-ok needs no token.
	cc, ck := ca.Issue("cert-ok")
	mcli, err := tlsconf.Client(tlsconf.Files{CA: ca.File, Cert: cc, Key: ck})
	if err != nil {
		t.Fatal(err)
	}
	c, err = DialWith(ctx, addr, DialOptions{TLS: mcli, Credential: []byte{}})
	if err != nil {
		t.Fatalf("mTLS identity: %v", err)
	}
	_ = c.Close()

	// A client that does not trust the server's CA is refused by its own
	// check; a client with a certificate from another CA by the server's.
	other := tlstest.NewCA(t, "other")
	bad, _ := tlsconf.Client(tlsconf.Files{CA: other.File})
	if _, err := DialWith(ctx, addr, DialOptions{TLS: bad, Credential: []byte("good")}); err == nil {
		t.Fatal("a server certificate from an untrusted CA was accepted")
	}
	oc, ok := other.Issue("cert-ok")
	forged, _ := tlsconf.Client(tlsconf.Files{CA: ca.File, Cert: oc, Key: ok})
	if _, err := DialWith(ctx, addr, DialOptions{TLS: forged, Credential: []byte{}}); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}
	// Plaintext to a TLS port fails; the server keeps serving.
	if _, err := DialWith(ctx, addr, DialOptions{Credential: []byte("good")}); err == nil {
		t.Fatal("plaintext fastrpc to a TLS port worked")
	}
	c, err = DialWith(ctx, addr, DialOptions{TLS: cli, Credential: []byte("good")})
	if err != nil {
		t.Fatalf("after refusals: %v", err)
	}
	_ = c.Close()
}

// The credential frame on arbitrary bytes: no panic, the authenticator
// sees a credential only from a MethodHello frame, and a refused or
// missing credential never reaches the handler.
func FuzzAuthenticate(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, MethodHello, 0, []byte("good")), 1, 1, []byte("ab")))
	f.Add(appendFrame(appendFrame(nil, MethodHello, 0, []byte("bad")), 1, 1, []byte("ab")))
	f.Add(appendFrame(nil, 1, 1, []byte("no credential")))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, MethodHello})
	f.Fuzz(func(t *testing.T, b []byte) {
		var served atomic.Bool
		m := &Mux{auth: func(_ net.Conn, cred []byte) (Handler, error) {
			if string(cred) != "good" {
				return nil, errors.New("refused")
			}
			return func(method uint8, p []byte) ([]byte, uint8) { served.Store(true); return echo(method, p) }, nil
		}}
		a, z := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			r := bufio.NewReader(z)
			if h, ok := m.authenticate(z, r, func(uint8, []byte) ([]byte, uint8) {
				t.Error("the unauthenticated handler was called")
				return nil, StatusOK
			}); ok {
				serveConn(z, r, h)
			}
			z.Close()
		}()
		go func() { _, _ = io.Copy(io.Discard, a) }()
		go func() { _, _ = a.Write(b); _ = a.Close() }()
		<-done
		// Served only after a first frame "MethodHello, any id, good".
		first := len(b) >= headerLen+4 && binary.LittleEndian.Uint32(b) == 1+8+4 && b[4] == MethodHello && string(b[headerLen:headerLen+4]) == "good"
		if served.Load() && !first {
			t.Fatalf("served without the credential frame first: %x", b)
		}
	})
}

// TestAuthenticatorAdmitsNoCredential: a connection that sends no
// credential frame, which the Authenticator lets in (a caller without a
// credential that the server serves), gets its first request answered
// like every later one.
func TestAuthenticatorAdmitsNoCredential(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMux(ln)
	var creds atomic.Int32
	m.SetAuthenticator(func(c net.Conn, cred []byte) (Handler, error) {
		if cred != nil {
			return nil, fmt.Errorf("only callers without a credential here")
		}
		creds.Add(1)
		return echo, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = m.Run(ctx, echo) })
	defer func() { cancel(); wg.Wait() }()
	c, err := DialWith(ctx, ln.Addr().String(), DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, in := range []string{"abc", "de", "f"} {
		got, err := c.Call(ctx, 1, []byte(in))
		if err != nil || len(got) != len(in) || got[0] != in[len(in)-1] {
			t.Fatalf("call %q: %q %v", in, got, err)
		}
	}
	if n := creds.Load(); n != 1 {
		t.Fatalf("authenticated %d times, want once per connection", n)
	}
	if _, err := DialWith(ctx, ln.Addr().String(), DialOptions{Credential: []byte("x")}); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("a refused credential: %v", err)
	}
}
