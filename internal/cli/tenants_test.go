package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvcache-go/mooncake/internal/etcdtest"
	"github.com/kvcache-go/mooncake/internal/leader"
	"github.com/kvcache-go/mooncake/internal/master"
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
	load, _, closeLoad, err := policyLoader("etcd://"+ep+"/mooncake-store/c1/tenants", false)
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
	missing, _, closeMissing, err := policyLoader("etcd://"+ep+"/nothing-here", false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeMissing()
	if _, err := missing(ctx); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing key: %v", err)
	}
	// Mooncake's etcd connector: an absent key is a policy without tenants.
	empty, saveEmpty, closeEmpty, err := policyLoader("etcd://"+ep+"/nothing-here", true)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEmpty()
	if b, err := empty(ctx); err != nil {
		t.Fatalf("absent key read as empty: %v", err)
	} else if set, err := tenant.Parse(b); err != nil || len(set.Tenants()) != 0 {
		t.Fatalf("absent key: %q %v", b, err)
	}
	// The admin API's quota change, written to the key and read again.
	esrc, err := tenant.NewSource(ctx, tenant.SourceConfig{Load: empty, Save: saveEmpty})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := esrc.Edit(ctx, func(b []byte) ([]byte, error) { return tenant.SetQuota(b, "t1", 1024) }); err != nil {
		t.Fatal(err)
	}
	if b, err := empty(ctx); err != nil || !strings.Contains(string(b), "t1") {
		t.Fatalf("the key after an edit: %q %v", b, err)
	} else if set, err := tenant.Parse(b); err != nil || set.Lookup("t1").QuotaBytes != 1024 {
		t.Fatalf("the key after an edit: %q %v", b, err)
	}
	if _, _, _, err := policyLoader("etcd://nokey", false); err == nil {
		t.Fatal("a URL without a key was accepted")
	}
}

// TestMooncakeTenantFlags: Mooncake's --enable_multi_tenants with its
// connector flags becomes the tenant policy's source (a file, or the etcd
// key mooncake-store/<cluster_id>/tenant_quota_policy that may be absent);
// the connector flags alone do nothing (a warning); what cannot work is
// refused.
func TestMooncakeTenantFlags(t *testing.T) {
	parse := func(args ...string) (masterSecurityFlags, string, error) {
		var (
			g        masterGflags
			ha       haFlags
			core     master.Config
			events   masterEventFlags
			sec      masterSecurityFlags
			host     = "127.0.0.1"
			port     = 0
			httpPort = 0
			strategy = "random"
			verbose  bool
		)
		f := pflag.NewFlagSet("master", pflag.ContinueOnError)
		ha.register(f)
		sec.register(f)
		g.register(f, &host, &port, &httpPort, &strategy, &core, &ha)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		var warn strings.Builder
		err := g.apply(&warn, &verbose, &events, &sec)
		return sec, warn.String(), err
	}
	for _, tc := range []struct {
		args        []string
		tenants     string
		absentEmpty bool
		warn        string
	}{
		{[]string{"--enable_multi_tenants=true", "--tenant_quota_connector_type=file", "--tenant_quota_connector_uri=/etc/q.yaml"}, "/etc/q.yaml", false, ""},
		{[]string{"--enable_multi_tenants", "--tenant_quota_connector_uri", "/etc/q.yaml"}, "/etc/q.yaml", false, ""},
		{[]string{"--enable_multi_tenants=true", "--tenant_quota_connector_type=etcd", "--tenant_quota_connector_uri=127.0.0.1:2379"},
			"etcd://127.0.0.1:2379/mooncake-store/mooncake_cluster/tenant_quota_policy", true, ""},
		{[]string{"--enable_multi_tenants=true", "--cluster_id=c7/", "--tenant_quota_connector_type=etcd", "--tenant_quota_connector_uri=h1:2379;h2:2379"},
			"etcd://h1:2379;h2:2379/mooncake-store/c7/tenant_quota_policy", true, ""},
		{[]string{"--tenant_quota_connector_uri=/etc/q.yaml"}, "", false, "ignored without --enable_multi_tenants"},
		{[]string{"--enable_multi_tenants=true", "--tenants=/own.yaml", "--tenant_quota_connector_uri=/etc/q.yaml"}, "/own.yaml", false, "--tenants given"},
		{[]string{"--enable_multi_tenants=false", "--tenant_quota_connector_uri=/etc/q.yaml"}, "", false, "ignored"},
	} {
		sec, warn, err := parse(tc.args...)
		if err != nil || sec.tenants != tc.tenants || sec.absentEmpty != tc.absentEmpty || (tc.warn == "") != (warn == "") || !strings.Contains(warn, tc.warn) {
			t.Errorf("%v: tenants %q absentEmpty %v warn %q err %v", tc.args, sec.tenants, sec.absentEmpty, warn, err)
		}
	}
	for _, args := range [][]string{
		{"--enable_multi_tenants=true"},
		{"--enable_multi_tenants=true", "--tenant_quota_connector_type=redis", "--tenant_quota_connector_uri=x"},
		{"--enable_multi_tenants=true", "--tenant_quota_connector_type=etcd", "--cluster_id=a/b", "--tenant_quota_connector_uri=h:1"},
	} {
		if _, _, err := parse(args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestMooncakeTenantsProcesses: a master started with Mooncake's tenant
// flags and a Mooncake policy (quotas, no credentials), a storage node
// without any credential; CLI clients naming tenants with --tenant-id (or
// MOONCAKE_TENANT_ID) see only their tenant's keys, the default tenant
// (not in the policy) cannot put (TENANT_NOT_REGISTERED), and the tenant
// quota API answers without a credential, as Mooncake's does.
func TestMooncakeTenantsProcesses(t *testing.T) {
	bin := buildBinary(t)
	policy := filepath.Join(t.TempDir(), "tenant_quotas.yaml")
	if err := os.WriteFile(policy, []byte("version: 1\ntenants:\n  - name: tenant-a\n    quota: 1MB\n  - name: tenant-b\n    quota: 2MB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := startProc(t, bin, "master", "--port", "0", "--http-port", "0", "--enable_multi_tenants=true",
		"--tenant_quota_connector_type=file", "--tenant_quota_connector_uri="+policy)
	got := m.waitLine(t, regexp.MustCompile(`grpc=(127\.0\.0\.1:\d+) http=(\S+)`), 30*time.Second)
	addr, httpAddr := got[1], got[2]
	n := startProc(t, bin, "store", "--master", addr, "--segment-size", "4MiB", "--unmount-grace", "100ms")
	n.waitLine(t, regexp.MustCompile(`store node mounted`), 30*time.Second)
	in := func(tenantID string, stdin []byte, args ...string) (string, string, int) {
		args = append(args, "--master", addr, "--timeout", "3s")
		if tenantID != "" {
			args = append(args, "--tenant-id", tenantID)
		}
		return run(t, bin, stdin, args...)
	}
	for _, tn := range []string{"tenant-a", "tenant-b"} {
		if out, e, code := in(tn, []byte("value of "+tn), "put", "same-key", "-"); code != 0 {
			t.Fatalf("%s put: %d %q %q", tn, code, out, e)
		}
	}
	if out, e, code := in("tenant-a", nil, "get", "same-key", "-"); code != 0 || out != "value of tenant-a" {
		t.Fatalf("tenant-a get: %d %q %q", code, out, e)
	}
	t.Setenv(tenantIDEnv, "tenant-b")
	if out, e, code := in("", nil, "get", "same-key", "-"); code != 0 || out != "value of tenant-b" {
		t.Fatalf("tenant-b (from %s) get: %d %q %q", tenantIDEnv, code, out, e)
	}
	t.Setenv(tenantIDEnv, "")
	if out, _, code := in("", nil, "ls"); code != 0 || strings.Contains(out, "same-key") {
		t.Fatalf("the default tenant lists another tenant's key: %d %q", code, out)
	}
	if _, e, code := in("", []byte("x"), "put", "k", "-"); code == 0 || !strings.Contains(strings.ToLower(e), "not registered") {
		t.Fatalf("the default tenant (not in the policy) put: %d %q", code, e)
	}
	resp, err := http.Get("http://" + httpAddr + "/api/v1/tenant_quotas?tenant_id=tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var q struct {
		Success bool
		Data    struct {
			TenantID            string `json:"tenant_id"`
			RequestedQuotaBytes uint64 `json:"requested_quota_bytes"`
			ChargedBytes        uint64 `json:"charged_bytes"`
			HasExplicitPolicy   bool   `json:"has_explicit_policy"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("tenant quotas: %d %v", resp.StatusCode, err)
	}
	if !q.Success || q.Data.TenantID != "tenant-a" || q.Data.RequestedQuotaBytes != 1<<20 || q.Data.ChargedBytes == 0 || !q.Data.HasExplicitPolicy {
		t.Fatalf("tenant-a's quota row %+v", q)
	}

	// Mooncake's PUT and DELETE of a tenant's quota, written to the policy
	// file: a tenant added can put at once, a tenant holding objects is
	// not deleted, an empty one is.
	call := func(method, query, body string) (int, map[string]any) {
		req, err := http.NewRequest(method, "http://"+httpAddr+"/api/v1/tenant_quotas?"+query, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("%s %s: %v", method, query, err)
		}
		return resp.StatusCode, out
	}
	if code, out := call("PUT", "tenant_id=tenant-c", `{"requested_quota_bytes": 2097152}`); code != http.StatusOK ||
		out["data"].(map[string]any)["requested_quota_bytes"] != float64(2<<20) {
		t.Fatalf("PUT tenant-c: %d %v", code, out)
	}
	if b, err := os.ReadFile(policy); err != nil || !strings.Contains(string(b), "tenant-c") || !strings.Contains(string(b), "tenant-a") {
		t.Fatalf("policy file after PUT: %q %v", b, err)
	}
	if out, e, code := in("tenant-c", []byte("c"), "put", "c-key", "-"); code != 0 {
		t.Fatalf("tenant-c put after PUT: %d %q %q", code, out, e)
	}
	for _, tc := range []struct {
		method, query, body string
		status              int
		code                float64
	}{
		{"PUT", "tenant_id=tenant-c", `{"requested_quota_bytes": 0}`, http.StatusBadRequest, -600},
		{"PUT", "tenant_id=_bad", `{"requested_quota_bytes": 1}`, http.StatusBadRequest, -600},
		{"DELETE", "tenant_id=tenant-a", "", http.StatusConflict, -1702},
		{"DELETE", "tenant_id=nobody", "", http.StatusNotFound, -704},
	} {
		if code, out := call(tc.method, tc.query, tc.body); code != tc.status || out["success"] != false || out["error_code"] != tc.code {
			t.Errorf("%s %s %s: %d %v", tc.method, tc.query, tc.body, code, out)
		}
	}
	// tenant-a, refused deletion (it holds objects), is listed and admitted as before.
	if b, err := os.ReadFile(policy); err != nil || !strings.Contains(string(b), "tenant-a") {
		t.Fatalf("policy file after a refused DELETE: %q %v", b, err)
	}
	if out, e, code := in("tenant-a", []byte("a2"), "put", "a-key-2", "-"); code != 0 {
		t.Fatalf("tenant-a put after a refused DELETE: %d %q %q", code, out, e)
	}
	if code, out := call("PUT", "tenant_id=tenant-d", `{"requested_quota_bytes": 1024}`); code != http.StatusOK {
		t.Fatalf("PUT tenant-d: %d %v", code, out)
	}
	if code, out := call("DELETE", "tenant_id=tenant-d", ""); code != http.StatusOK || out["success"] != true {
		t.Fatalf("DELETE tenant-d: %d %v", code, out)
	}
	if _, e, code := in("tenant-d", []byte("d"), "put", "d-key", "-"); code == 0 || !strings.Contains(strings.ToLower(e), "not registered") {
		t.Fatalf("tenant-d put after DELETE: %d %q", code, e)
	}
}

// TestTenantWatermarkFlag: Mooncake's --tenant_eviction_high_watermark_ratio
// and ours set the core's tenant watermark; 0 turns it off; out of [0, 1]
// is refused.
func TestTenantWatermarkFlag(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want float64
	}{
		{"--tenant_eviction_high_watermark_ratio=0.8", 0.8},
		{"--tenant-eviction-high-watermark=0.95", 0.95},
		{"--tenant_eviction_high_watermark_ratio=0", -1},
	} {
		var core master.Config
		f := pflag.NewFlagSet("master", pflag.ContinueOnError)
		registerMooncakeMasterFlags(f, &core)
		if err := f.Parse([]string{tc.arg}); err != nil || core.TenantHighWatermark != tc.want {
			t.Errorf("%s: %v, %v", tc.arg, core.TenantHighWatermark, err)
		}
	}
	for _, bad := range []string{"--tenant-eviction-high-watermark=1.5", "--tenant-eviction-high-watermark=-0.1", "--tenant-eviction-high-watermark=x"} {
		var core master.Config
		f := pflag.NewFlagSet("master", pflag.ContinueOnError)
		f.SetOutput(io.Discard)
		registerMooncakeMasterFlags(f, &core)
		if err := f.Parse([]string{bad}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
