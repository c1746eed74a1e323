package tlsconf_test

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvcache-go/mooncake/internal/tlsconf"
	"github.com/kvcache-go/mooncake/internal/tlsconf/tlstest"
)

func TestFiles(t *testing.T) {
	ca := tlstest.NewCA(t, "t")
	cert, key := ca.Issue("srv")
	junk := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(junk, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := tlsconf.Server(tlsconf.Files{}); c != nil || err != nil {
		t.Fatalf("zero Files: %v %v", c, err)
	}
	for name, f := range map[string]tlsconf.Files{
		"no key":          {Cert: cert},
		"missing file":    {Cert: cert + ".nope", Key: key},
		"key of no cert":  {Cert: key, Key: key},
		"junk CA":         {Cert: cert, Key: key, CA: junk},
		"require, no CA":  {Cert: cert, Key: key, RequireClientCert: true},
		"missing CA file": {Cert: cert, Key: key, CA: junk + ".nope"},
	} {
		if _, err := tlsconf.Server(f); !errors.Is(err, tlsconf.ErrConfig) {
			t.Errorf("server %s: %v", name, err)
		}
	}
	if _, err := tlsconf.Client(tlsconf.Files{CA: junk}); !errors.Is(err, tlsconf.ErrConfig) {
		t.Errorf("client junk CA: %v", err)
	}
	srv, err := tlsconf.Server(tlsconf.Files{Cert: cert, Key: key, CA: ca.File, RequireClientCert: true})
	if err != nil || srv.ClientAuth != tls.RequireAndVerifyClientCert || srv.MinVersion != tls.VersionTLS12 {
		t.Fatalf("server: %+v %v", srv, err)
	}
	// A handshake with a client certificate: Names reads its identity.
	cc, ck := ca.Issue("client-x")
	cli, err := tlsconf.Client(tlsconf.Files{CA: ca.File, Cert: cc, Key: ck, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	done := make(chan []string, 1)
	go func() {
		s := tls.Server(a, srv)
		if err := s.Handshake(); err != nil {
			done <- nil
			return
		}
		done <- tlsconf.Names(s.ConnectionState())
	}()
	c := tls.Client(b, cli)
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	names := <-done
	b.Close() // the pipe itself: a TLS close would wait for its peer to read the alert
	a.Close()
	if len(names) == 0 || names[0] != "client-x" {
		t.Fatalf("names %v", names)
	}
	if tlsconf.Names(tls.ConnectionState{}) != nil {
		t.Fatal("names without a certificate")
	}
}
