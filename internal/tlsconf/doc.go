// Package tlsconf builds the crypto/tls configurations of the store's
// control plane (the master's gRPC and fastrpc port) from PEM files:
// Server for the master (its certificate, and, for mutual TLS, the CA its
// clients' certificates must chain to), Client for the store clients,
// storage nodes and the CLI (the CA that signs the master's certificate,
// and optionally the client's own certificate). Both offer TLS 1.2 or
// later; the server advertises ALPN "h2" (gRPC requires it) and
// "mcfrpc" (fastrpc, which shares the port).
//
// Plaintext stays the default: a zero Files is no TLS (Enabled reports
// false). Names returns the identities of a verified client certificate
// (common name, then DNS names) for mapping to a tenant (package
// internal/tenant, cert_names).
//
// tlsconf/tlstest makes a throwaway CA and certificates for tests.
package tlsconf
