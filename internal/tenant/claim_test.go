package tenant

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// A Mooncake policy: tenants with quotas and no credentials.
const policyMooncake = `
version: 1
tenants:
  - name: tenant-a
    quota: 200GB
  - name: tenant-b
    quota: 500GB
`

func TestClaimMooncakePolicy(t *testing.T) {
	s, err := Parse([]byte(policyMooncake))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Claim("tenant-a")
	if err != nil || a != s.Lookup("tenant-a") || !a.Open || a.Unregistered || a.Namespace != Namespace("tenant-a") {
		t.Fatalf("Claim(tenant-a) = %+v, %v", a, err)
	}
	// Not listed: entered unregistered (Mooncake: reads in its namespace,
	// puts refused); "" is the default tenant.
	for _, name := range []string{"tenant-c", "", DefaultName} {
		c, err := s.Claim(name)
		want := name
		if want == "" {
			want = DefaultName
		}
		if err != nil || c.Name != want || !c.Unregistered || c.Namespace != Namespace(want) || c.Admin {
			t.Fatalf("Claim(%q) = %+v, %v", name, c, err)
		}
	}
	for _, bad := range []string{"_x", "a/b", "a\x01", strings.Repeat("n", 65)} {
		if c, err := s.Claim(bad); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("Claim(%q) = %+v, %v; want refused", bad, c, err)
		}
	}
}

func TestClaimPolicyWithCredentials(t *testing.T) {
	s, err := Parse([]byte(policyAB + `
  - name: open-one
    quota: 1MB
`))
	if err != nil {
		t.Fatal(err)
	}
	if o, err := s.Claim("open-one"); err != nil || !o.Open {
		t.Fatalf("an open tenant of a policy with credentials: %+v, %v", o, err)
	}
	// A tenant with a token, an admin, a tenant the policy does not list,
	// and no name at all: each needs a credential.
	for _, name := range []string{"tenant-a", "ops", "tenant-z", ""} {
		if c, err := s.Claim(name); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("Claim(%q) = %+v, %v; want ErrUnauthenticated", name, c, err)
		}
	}
	if s.Lookup("tenant-a").Open || s.Lookup("ops").Open {
		t.Fatal("a tenant with credentials or an admin is not open")
	}
	a := s.Lookup("tenant-a")
	for _, name := range []string{"", DefaultName, "tenant-a"} {
		if got, err := s.ClaimAs(a, name); err != nil || got != a {
			t.Fatalf("ClaimAs(a, %q) = %+v, %v", name, got, err)
		}
	}
	for _, name := range []string{"tenant-b", "open-one", "ops"} {
		if got, err := s.ClaimAs(a, name); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("tenant-a's token naming %q = %+v, %v; want refused", name, got, err)
		}
	}
	ops := s.Lookup("ops")
	if got, err := s.ClaimAs(ops, "tenant-b"); err != nil || got != s.Lookup("tenant-b") {
		t.Fatalf("an admin naming tenant-b: %+v, %v", got, err)
	}
	if got, err := s.ClaimAs(ops, "tenant-z"); err != nil || !got.Unregistered || got.Namespace != Namespace("tenant-z") || got.Admin {
		t.Fatalf("an admin naming an unlisted tenant: %+v, %v", got, err)
	}
	if got, err := s.ClaimAs(ops, DefaultName); err != nil || got != ops {
		t.Fatalf("an admin naming the default tenant stays admin: %+v, %v", got, err)
	}
}

func TestEmptyPolicy(t *testing.T) {
	s, err := Parse([]byte("version: 1\ntenants: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim("tenant-a"); err != nil || !c.Unregistered {
		t.Fatalf("Claim on an empty policy: %+v, %v", c, err)
	}
}

func TestParseRefusesNULToken(t *testing.T) {
	if _, err := Parse([]byte("version: 1\ntenants: [{name: a, tokens: [{token: \"\\0abcdefgh\"}]}]")); !errors.Is(err, ErrPolicy) {
		t.Fatalf("a token starting with NUL: %v", err)
	}
}

func TestCredentialFrame(t *testing.T) {
	for _, tc := range []struct{ token, tenant string }{
		{"secret-token", ""}, {"", "tenant-a"}, {"secret-token", "tenant-a"}, {"", ""},
	} {
		b := EncodeCredential(tc.token, tc.tenant)
		tok, ten, err := DecodeCredential(b)
		if err != nil || tok != tc.token || ten != tc.tenant {
			t.Fatalf("%+v: decoded %q %q %v", tc, tok, ten, err)
		}
	}
	for _, bad := range [][]byte{{0}, {0, 'X', 1, 'a'}, {0, 'T'}, {0, 'T', 0}, {0, 'T', 5, 'a'}, bytes.Repeat([]byte{'x'}, MaxCredential+1)} {
		if tok, ten, err := DecodeCredential(bad); !errors.Is(err, ErrBadCredential) {
			t.Fatalf("%q decoded as %q %q %v", bad, tok, ten, err)
		}
	}
}

func FuzzDecodeCredential(f *testing.F) {
	f.Add(EncodeCredential("token", "tenant"))
	f.Add([]byte("plain-token"))
	f.Add([]byte{0, 'T', 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, ten, err := DecodeCredential(b)
		if err != nil {
			return
		}
		if ten == "" {
			if tok != string(b) {
				t.Fatalf("a plain frame %q decoded as token %q", b, tok)
			}
			return
		}
		if got := EncodeCredential(tok, ten); !bytes.Equal(got, b) {
			t.Fatalf("%q decoded as %q %q, which encode as %q", b, tok, ten, got)
		}
	})
}
