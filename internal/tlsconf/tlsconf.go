package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ErrConfig: certificate files that cannot be used.
var ErrConfig = errors.New("tls config")

// Files names the PEM files of one side.
type Files struct {
	Cert string // own certificate chain (server: required; client: for mutual TLS)
	Key  string // its private key
	// CA: server side, the CA client certificates must chain to (set:
	// mutual TLS); client side, the CA of the server's certificate ("":
	// the system roots).
	CA string
	// RequireClientCert (server side, with CA): refuse clients without a
	// certificate. Without it a client certificate is verified when sent
	// and bearer tokens stay the credential of the others.
	RequireClientCert bool
	// ServerName (client side) overrides the name the server's
	// certificate is checked against (default: the dialled host).
	ServerName string
}

// Enabled reports whether the files ask for TLS at all.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// ALPN are the protocols of the master's port (a server configuration
// made elsewhere must offer them: gRPC clients require "h2").
var ALPN = []string{"h2", "mcfrpc"}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrConfig, path)
	}
	return p, nil
}

// Server is the master's configuration: nil (plaintext) for a zero Files.
func Server(f Files) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if f.Cert == "" || f.Key == "" {
		return nil, fmt.Errorf("%w: a TLS server needs both a certificate and a key", ErrConfig)
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: ALPN}
	if f.CA != "" {
		if c.ClientCAs, err = loadPool(f.CA); err != nil {
			return nil, err
		}
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if f.RequireClientCert {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
	} else if f.RequireClientCert {
		return nil, fmt.Errorf("%w: requiring client certificates needs a CA", ErrConfig)
	}
	return c, nil
}

// Client is a client's configuration: nil (plaintext) for a zero Files.
func Client(f Files) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	var err error
	if f.CA != "" {
		if c.RootCAs, err = loadPool(f.CA); err != nil {
			return nil, err
		}
	}
	if f.Cert != "" || f.Key != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Names are the identities of the verified client certificate of a
// connection: its common name, then its DNS names (none without one).
func Names(st tls.ConnectionState) []string {
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return nil
	}
	leaf := st.VerifiedChains[0][0]
	out := make([]string, 0, 1+len(leaf.DNSNames))
	if leaf.Subject.CommonName != "" {
		out = append(out, leaf.Subject.CommonName)
	}
	return append(out, leaf.DNSNames...)
}
