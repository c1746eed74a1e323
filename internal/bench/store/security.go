package store

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"github.com/kvcache-go/mooncake/internal/tlsconf"
)

// poolSecurity is a bench pool's tenants and TLS (zero: neither).
type poolSecurity struct {
	tenants        *tenant.Source
	secret, token  string // the storage nodes' cluster secret, the clients' tenant token
	srvTLS, cliTLS *tls.Config
	noLocal        bool           // no same-host fastrpc socket (TCP, as TLS)
	grants         *grant.Keyring // data-path grants: the master signs, the nodes check
	transport      string         // overrides the pool's transfer transport ("" = the run's)
}

// SecurityConfig configures RunSecurity.
type SecurityConfig struct {
	Sizes, Clients []int
	Rounds         int
	Duration       time.Duration
	Transport      string // auto, tcp, shm
	// Features are the comparisons to run (SecurityFeatures; nil: all).
	Features []string
}

// SecurityFeatures are RunSecurity's comparisons: tenants, grants, and
// TLS (rows tls and tls-vs-local).
var SecurityFeatures = []string{"tenants", "grants", "tls"}

// SecurityRow is one configuration measured without and with a security
// feature, round by round.
type SecurityRow struct {
	Feature       string // "tenants", "grants", "tls" (against plaintext TCP) or "tls-vs-local" (against the same-host socket)
	Op            string // put, get
	Size, Clients int
	Off, On       Row // each side's median round (by ops/s)
	// Paired is each round's ratio of On's ops/s to Off's, of the two
	// measurements the round took one right after the other; CPU the
	// same for CPU time per key.
	Paired, CPU Ratios
}

// Ratio is the on/off ratio of ops/s: the median of the rounds' paired
// ratios.
func (r SecurityRow) Ratio() float64 { return r.Paired.Median() }

// MedianRatio is On's median round's ops/s over Off's.
func (r SecurityRow) MedianRatio() float64 {
	if r.Off.Ops == 0 {
		return 0
	}
	return r.On.OpsPerSec() / r.Off.OpsPerSec()
}

// SecurityResult is what RunSecurity measured.
type SecurityResult struct{ Rows []SecurityRow }

// RunSecurity measures what the control plane's security costs: store put
// and get with tenants on (a tenant policy, clients with a token, keys in
// the tenant's namespace, quota accounting) vs off, with data-path grants
// vs without (both pools' transfers on TCP: a node with grants offers no
// shared memory), and 4 KiB puts with
// the master's port on TLS vs plaintext TCP ("tls") and vs plaintext with
// the same-host socket a TLS master gives up ("tls-vs-local"). Six pools
// run in this process (durable metadata on, the master's default).
//
// Each configuration's keys (together a quarter of a pool) are put once
// in both pools, unmeasured; then every round measures the two pools one
// right after the other (which goes first alternates), a phase of
// Duration each: puts upsert random keys of the set, gets read random
// keys. Short rounds, many of them, and the median of the rounds' paired
// ratios (SecurityRow.Paired) make the on/off figure steady where the
// machine's other load comes and goes.
func RunSecurity(ctx context.Context, c SecurityConfig) (*SecurityResult, error) {
	const segSize = 256 << 20
	maxClients, maxSize := slices.Max(c.Clients), slices.Max(c.Sizes)
	set, err := tenant.Parse([]byte("version: 1\ntenants: [{name: bench, quota: 1TB, tokens: [{token: bench-token-0001}]}]"))
	if err != nil {
		return nil, err
	}
	srvTLS, cliTLS, err := selfSignedTLS()
	if err != nil {
		return nil, err
	}
	gkeys, err := grant.ParseKeys([]byte("1:" + grant.NewKeyHex()))
	if err != nil {
		return nil, err
	}
	secs := map[string]poolSecurity{
		"off": {},
		// Grants take shared memory away (a node with grants offers none),
		// so they are compared with a pool on TCP too.
		"grants":  {grants: gkeys, transport: "tcp"},
		"off-tcp": {transport: "tcp"},
		"tenants": {tenants: tenant.Static(set), secret: "bench-cluster-secret", token: "bench-token-0001"},
		"tls":     {srvTLS: srvTLS, cliTLS: cliTLS},
		"tcp":     {noLocal: true},
	}
	for _, f := range c.Features {
		if !slices.Contains(SecurityFeatures, f) {
			return nil, fmt.Errorf("bench store security: feature %q: want one of %v", f, SecurityFeatures)
		}
	}
	want := func(f string) bool { return len(c.Features) == 0 || slices.Contains(c.Features, f) }
	uses := map[string][]string{"tenants": {"off", "tenants"}, "grants": {"off-tcp", "grants"}, "tls": {"tcp", "tls", "off"}}
	pools := map[string]*benchPool{}
	for name, sec := range secs {
		if !slices.ContainsFunc(SecurityFeatures, func(f string) bool { return want(f) && slices.Contains(uses[f], name) }) {
			continue // no chosen comparison uses it
		}
		var p *benchPool
		// Every goroutine of the pool (its master's, nodes' and clients')
		// carries the label pool=NAME in a CPU profile (--cpuprofile;
		// go tool pprof -tagfocus pool=grants).
		pprof.Do(ctx, pprof.Labels("pool", name), func(ctx context.Context) {
			p, err = startBenchPool(ctx, true, segSize, maxClients, maxSize, c.Transport, sec)
		})
		if err != nil {
			return nil, fmt.Errorf("bench store security: %s pool: %w", name, err)
		}
		defer p.close()
		pools[name] = p
	}
	res := &SecurityResult{}
	compare := func(feature, base, on, op string, size, n int) {
		per := max(1, int(segSize/4)/size/n)
		prefix := fmt.Sprintf("s/%s/%d/%d", feature, size, n)
		phase := "get-into" // the keys the put phase wrote
		if op == "put" {
			// Every key once, unmeasured; the rounds then upsert.
			for _, name := range []string{base, on} {
				// Labelled too: the lanes dialed here serve the rounds.
				pprof.Do(ctx, pprof.Labels("pool", name), func(ctx context.Context) {
					runPhase(ctx, SystemInProcess, pools[name].kv[:n], "put", size, per, prefix, 0)
				})
			}
			phase = "upsert"
		}
		rows := map[string][]Row{}
		for r := range c.Rounds {
			order := []string{base, on}
			if r%2 == 1 {
				order = []string{on, base}
			}
			for _, name := range order {
				pprof.Do(ctx, pprof.Labels("pool", name), func(ctx context.Context) {
					rows[name] = append(rows[name], runPhase(ctx, SystemInProcess, pools[name].kv[:n], phase, size, per, prefix, c.Duration))
				})
			}
		}
		paired, cpu := pairRatios(rows[base], rows[on])
		row := SecurityRow{Feature: feature, Op: op, Size: size, Clients: n, Paired: paired, CPU: cpu,
			Off: medianRow(slices.Clone(rows[base])), On: medianRow(slices.Clone(rows[on]))}
		row.Off.Op, row.On.Op = op, op
		res.Rows = append(res.Rows, row)
	}
	for _, size := range c.Sizes {
		for _, n := range c.Clients {
			if want("tenants") {
				compare("tenants", "off", "tenants", "put", size, n)
				compare("tenants", "off", "tenants", "get", size, n)
			}
			if want("grants") {
				compare("grants", "off-tcp", "grants", "put", size, n)
				compare("grants", "off-tcp", "grants", "get", size, n)
			}
		}
	}
	for _, n := range c.Clients {
		if want("tls") {
			compare("tls", "tcp", "tls", "put", 4096, n)
			compare("tls-vs-local", "off", "tls", "put", 4096, n)
		}
	}
	return res, nil
}

// selfSignedTLS makes a throwaway certificate for 127.0.0.1 and the
// client configuration that trusts it.
func selfSignedTLS() (*tls.Config, *tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench-master"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	srv := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}},
		MinVersion: tls.VersionTLS12, NextProtos: tlsconf.ALPN}
	return srv, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
