package tenant

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

const policyAB = `
version: 1
tenants:
  - name: tenant-a
    quota: 1MB
    max_objects: 10
    tokens:
      - token: token-of-a-1234
      - token: old-token-of-a
        expires: 2026-01-01T00:00:00Z
    cert_names: [client-a]
  - name: tenant-b
    quota: "2 KB"
    tokens: [{token: token-of-b-1234}]
  - name: ops
    admin: true
    tokens: [{token: token-of-ops-12}]
`

func TestParseAndAuthenticate(t *testing.T) {
	s, err := Parse([]byte(policyAB))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		token, want string
		err         string
	}{
		{"token-of-a-1234", "tenant-a", ""},
		{"token-of-b-1234", "tenant-b", ""},
		{"token-of-ops-12", "ops", ""},
		{"token-of-a-1235", "", "unknown token"},
		{"", "", "no credential"},
		{"old-token-of-a", "", "expired"},
	} {
		got, err := s.Authenticate(tc.token, now)
		if tc.err != "" {
			if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Authenticate(%q) = %v, %v; want %q", tc.token, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.Name != tc.want {
			t.Fatalf("Authenticate(%q) = %v, %v; want %s", tc.token, got, err, tc.want)
		}
	}
	a := s.Lookup("tenant-a")
	if a.QuotaBytes != 1<<20 || a.QuotaObjects != 10 || a.Namespace != Namespace("tenant-a") || a.Admin {
		t.Fatalf("tenant-a = %+v", a)
	}
	if b := s.Lookup("tenant-b"); b.QuotaBytes != 2048 {
		t.Fatalf("tenant-b quota %d", b.QuotaBytes)
	}
	if ops := s.Lookup("ops"); !ops.Admin || ops.Namespace != "" {
		t.Fatalf("ops = %+v: an admin uses the raw key space", ops)
	}
	if s.ByCert("nobody", "client-a") != a || s.ByCert("x") != nil {
		t.Fatal("ByCert")
	}
	// The same token before its expiry works.
	if got, err := s.Authenticate("old-token-of-a", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil || got != a {
		t.Fatalf("unexpired old token: %v %v", got, err)
	}
	// AuthenticateUntil tells the expiry Expires tells, and refuses as
	// Authenticate does.
	day := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if got, until, err := s.AuthenticateUntil("old-token-of-a", day); err != nil || got != a || until.IsZero() || !until.Equal(s.Expires("old-token-of-a")) {
		t.Fatalf("AuthenticateUntil = %v %v %v", got, until, err)
	}
	if _, _, err := s.AuthenticateUntil("old-token-of-a", s.Expires("old-token-of-a")); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("AuthenticateUntil at the expiry: %v", err)
	}
	if _, _, err := s.AuthenticateUntil("no-such-token", day); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("AuthenticateUntil of an unknown token: %v", err)
	}
}

func TestParseSHA256Token(t *testing.T) {
	sum := sha256.Sum256([]byte("hashed-token-99"))
	s, err := Parse([]byte(`{"version":1,"tenants":[{"name":"h","tokens":[{"sha256":"` + hex.EncodeToString(sum[:]) + `"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Authenticate("hashed-token-99", time.Now()); err != nil || got.Name != "h" {
		t.Fatalf("%v %v", got, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, p := range map[string]string{
		"version":       "version: 2\ntenants: [{name: a}]",
		"reserved":      "version: 1\ntenants: [{name: _a}]",
		"slash":         "version: 1\ntenants: [{name: a/b}]",
		"control":       "version: 1\ntenants: [{name: \"a\\x01\"}]",
		"twice":         "version: 1\ntenants: [{name: a}, {name: a}]",
		"unknown field": "version: 1\ntenants: [{name: a, qouta: 1GB}]",
		"bad quota":     "version: 1\ntenants: [{name: a, quota: lots}]",
		"negative":      "version: 1\ntenants: [{name: a, quota: -1}]",
		"short token":   "version: 1\ntenants: [{name: a, tokens: [{token: abc}]}]",
		"shared token":  "version: 1\ntenants: [{name: a, tokens: [{token: samesame1}]}, {name: b, tokens: [{token: samesame1}]}]",
		"bad sha":       "version: 1\ntenants: [{name: a, tokens: [{sha256: zz}]}]",
		"both":          "version: 1\ntenants: [{name: a, tokens: [{token: abcdefghij, sha256: 00}]}]",
		"dup cert":      "version: 1\ntenants: [{name: a, cert_names: [x]}, {name: b, cert_names: [x]}]",
		"not yaml":      "{{{",
	} {
		if _, err := Parse([]byte(p)); !errors.Is(err, ErrPolicy) {
			t.Errorf("%s: Parse = %v, want ErrPolicy", name, err)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"": 0, "4096": 4096, "4096B": 4096, "1KB": 1024, "1.5MB": 3 << 19, "200GB": 200 << 30, "2 TB": 2 << 40} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"x", "-1", "1XB", "99999999999TB", "NaN"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
}

func TestSplitNamespace(t *testing.T) {
	for _, tc := range []struct{ key, tenant, user string }{
		{Namespace("a") + "k/1", "a", "k/1"},
		{"plain", "", "plain"},
		{"\x00t/", "", "\x00t/"},
		{"\x00t//x", "", "\x00t//x"},
		{"\x00slot/1", "", "\x00slot/1"},
		{"\x00t", "", "\x00t"},
		{"", "", ""},
	} {
		if tn, u := Split(tc.key); tn != tc.tenant || u != tc.user {
			t.Errorf("Split(%q) = %q %q", tc.key, tn, u)
		}
		if tn, u := SplitBytes([]byte(tc.key)); string(tn) != tc.tenant || string(u) != tc.user {
			t.Errorf("SplitBytes(%q) = %q %q", tc.key, tn, u)
		}
		for _, name := range []string{"a", "ab", "", "t"} {
			if got, want := InNamespace([]byte(tc.key), name), name != "" && name == tc.tenant; got != want {
				t.Errorf("InNamespace(%q, %q) = %v, want %v", tc.key, name, got, want)
			}
		}
	}
}

// FuzzInNamespace: InNamespace(key, name) holds exactly when SplitBytes
// reads name (a tenant name: no '/') off key.
func FuzzInNamespace(f *testing.F) {
	f.Add([]byte(Namespace("a")+"k"), "a")
	f.Add([]byte(Namespace("ab")+"k"), "a")
	f.Add([]byte("\x00t/a"), "a")
	f.Add([]byte("\x00t//"), "")
	f.Fuzz(func(t *testing.T, key []byte, name string) {
		if strings.Contains(name, "/") { // not a tenant name
			return
		}
		tn, _ := SplitBytes(key)
		if got, want := InNamespace(key, name), len(tn) > 0 && string(tn) == name; got != want {
			t.Fatalf("InNamespace(%q, %q) = %v, SplitBytes reads %q", key, name, got, tn)
		}
	})
}

// TestSourceRotation: a changed file is put in force by the next reload;
// a broken one leaves the current Set; Run picks changes up by itself.
func TestSourceRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("version: 1\ntenants: [{name: a, tokens: [{token: first-token}]}]")
	errs := make(chan error, 16)
	src, err := NewSource(context.Background(), SourceConfig{Load: FileLoader(path), Interval: 5 * time.Millisecond,
		OnError: func(err error) {
			select {
			case errs <- err:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Set().Authenticate("first-token", time.Now()); err != nil {
		t.Fatal(err)
	}
	g := src.Generation()
	write("version: 1\ntenants: [{name: a, tokens: [{token: second-token}]}]")
	if changed, err := src.Reload(context.Background()); !changed || err != nil {
		t.Fatalf("Reload = %v %v", changed, err)
	}
	if _, err := src.Set().Authenticate("first-token", time.Now()); err == nil {
		t.Fatal("a rotated-out token still works")
	}
	if src.Generation() != g+1 {
		t.Fatalf("generation %d, want %d", src.Generation(), g+1)
	}
	write("version: 1\ntenants: [{name: _bad}]")
	if _, err := src.Reload(context.Background()); !errors.Is(err, ErrPolicy) {
		t.Fatalf("broken policy: %v", err)
	}
	if _, err := src.Set().Authenticate("second-token", time.Now()); err != nil {
		t.Fatal("a broken policy replaced the one in force")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	select {
	case err := <-errs:
		if !errors.Is(err, ErrPolicy) {
			t.Fatalf("Run reported %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not report the broken policy")
	}
	write("version: 1\ntenants: [{name: a, tokens: [{token: third-token}]}]")
	waitfor.Cond(t, 10*time.Second, "Run puts the new policy in force", func() bool {
		_, err := src.Set().Authenticate("third-token", time.Now())
		return err == nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(policyAB))
	f.Add([]byte(`{"version":1,"tenants":[{"name":"a","quota":"1.5GB","tokens":[{"token":"0123456789"}]}]}`))
	f.Add([]byte("version: 1\ntenants: [{name: a, quota: 1e30}]"))
	f.Add([]byte("version: 1\ntenants: [{name: \"\\u0000\"}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrPolicy) {
				t.Fatalf("error %v is not ErrPolicy", err)
			}
			return
		}
		for _, tn := range s.Tenants() {
			if checkName(tn.Name) != nil || s.Lookup(tn.Name) != tn {
				t.Fatalf("accepted tenant %q", tn.Name)
			}
			if !tn.Admin {
				if got, user := Split(tn.Namespace + "k"); got != tn.Name || user != "k" {
					t.Fatalf("namespace of %q splits to %q %q", tn.Name, got, user)
				}
			}
		}
		_, _ = s.Authenticate(string(b), time.Now())
	})
}

func FuzzAuthorization(f *testing.F) {
	s, err := Parse([]byte(policyAB))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("Bearer token-of-a-1234")
	f.Add("Bearer ")
	f.Add("bearer token-of-a-1234")
	f.Add("Bearer token-of-a-1234 ")
	f.Fuzz(func(t *testing.T, h string) {
		tn, err := s.Authenticate(Bearer(h), time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
		if (err == nil) != (h == "Bearer token-of-a-1234" || h == "Bearer token-of-b-1234" || h == "Bearer token-of-ops-12") {
			t.Fatalf("%q authenticated as %v, %v", h, tn, err)
		}
	})
}
