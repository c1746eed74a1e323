package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/etcdtest"
	"github.com/kvcache-go/mooncake/internal/leader"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"github.com/kvcache-go/mooncake/internal/tlsconf/tlstest"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// TestTenantsProcesses: a master with --tenants and TLS; a storage node
// with the cluster secret; two tenants' CLI clients with --token see only
// their own keys; a token rotated out by SIGHUP is refused; plaintext to
// the TLS port fails.
func TestTenantsProcesses(t *testing.T) {
	bin := buildBinary(t)
	ca := tlstest.NewCA(t, "cli")
	cert, key := ca.Issue("master")
	policy := filepath.Join(t.TempDir(), "tenants.yaml")
	write := func(s string) {
		if err := os.WriteFile(policy, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const p = "version: 1\ntenants:\n  - {name: a, tokens: [{token: token-a-0001}]}\n  - {name: b, tokens: [{token: token-b-0001}]}\n"
	write(p)
	m := startProc(t, bin, "master", "--port", "0", "--http-port", "-1", "--secret", "s3cret", "--tenants", policy,
		"--tenants-reload", "1h", "--tls-cert", cert, "--tls-key", key)
	addr := m.waitLine(t, regexp.MustCompile(`grpc=(127\.0\.0\.1:\d+)`), 30*time.Second)[1]
	n := startProc(t, bin, "store", "--master", addr, "--segment-size", "4MiB", "--secret", "s3cret", "--tls-ca", ca.File, "--unmount-grace", "100ms")
	n.waitLine(t, regexp.MustCompile(`store node mounted`), 30*time.Second)
	as := func(tok string, args ...string) (string, string, int) {
		return run(t, bin, []byte("value"), append(args, "--master", addr, "--tls-ca", ca.File, "--token", tok, "--timeout", "3s")...)
	}
	if out, e, code := as("token-a-0001", "put", "a-key", "-"); code != 0 {
		t.Fatalf("a put: %d %q %q", code, out, e)
	}
	if out, _, code := as("token-a-0001", "ls"); code != 0 || !strings.Contains(out, "a-key") {
		t.Fatalf("a ls: %d %q", code, out)
	}
	if out, _, code := as("token-b-0001", "ls"); code != 0 || strings.Contains(out, "a-key") {
		t.Fatalf("b ls shows a's key: %d %q", code, out)
	}
	if _, e, code := as("token-x-0001", "ls"); code == 0 || !strings.Contains(e, "unauthorized") {
		t.Fatalf("unknown token: %d %q", code, e)
	}
	if _, _, code := run(t, bin, nil, "ls", "--master", addr, "--token", "token-a-0001", "--timeout", "2s"); code == 0 {
		t.Fatal("plaintext to the TLS port worked")
	}
	// Rotate a's token; SIGHUP reloads the policy at once.
	write(strings.Replace(p, "token-a-0001", "token-a-0002", 1))
	if err := m.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 15*time.Second, "the rotated token in force", func() bool {
		out, _, code := as("token-a-0002", "ls")
		return code == 0 && strings.Contains(out, "a-key")
	})
	if _, e, code := as("token-a-0001", "ls"); code == 0 || !strings.Contains(e, "unauthorized") {
		t.Fatalf("rotated-out token: %d %q", code, e)
	}
}

// TestPolicyFromEtcd: the policy read from an etcd key, and read again
// after the key changed; a missing key is an error.
func TestPolicyFromEtcd(t *testing.T) {
	ep, _ := etcdtest.Start(t)
	cli, err := leader.NewEtcdClient([]string{ep})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "mooncake-store/c1/tenants", "version: 1\ntenants: [{name: a, tokens: [{token: token-a-0001}]}]"); err != nil {
		t.Fatal(err)
	}
	load, closeLoad, err := policyLoader("etcd://" + ep + "/mooncake-store/c1/tenants")
	if err != nil {
		t.Fatal(err)
	}
	defer closeLoad()
	src, err := tenant.NewSource(ctx, tenant.SourceConfig{Load: load})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Set().Authenticate("token-a-0001", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "mooncake-store/c1/tenants", "version: 1\ntenants: [{name: a, tokens: [{token: token-a-0002}]}]"); err != nil {
		t.Fatal(err)
	}
	if changed, err := src.Reload(ctx); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if _, err := src.Set().Authenticate("token-a-0001", time.Now()); err == nil {
		t.Fatal("the old token still works")
	}
	missing, closeMissing, err := policyLoader("etcd://" + ep + "/nothing-here")
	if err != nil {
		t.Fatal(err)
	}
	defer closeMissing()
	if _, err := missing(ctx); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing key: %v", err)
	}
	if _, _, err := policyLoader("etcd://nokey"); err == nil {
		t.Fatal("a URL without a key was accepted")
	}
}
