package tenant

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSetQuotaAndRemove(t *testing.T) {
	// A tenant's quota changed and one added; tokens, expiries, cert
	// names, admins and max_objects are carried over.
	b, err := SetQuota([]byte(policyAB), "tenant-b", 1<<63-1)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = SetQuota(b, "tenant-new", 4096); err != nil {
		t.Fatal(err)
	}
	s, err := Parse(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if q := s.Lookup("tenant-b").QuotaBytes; q != 1<<63-1 {
		t.Fatalf("tenant-b quota %d (exact to the byte)", q)
	}
	if n := s.Lookup("tenant-new"); n == nil || n.QuotaBytes != 4096 || !n.Open {
		t.Fatalf("tenant-new %+v", n)
	}
	a := s.Lookup("tenant-a")
	if a.QuotaBytes != 1<<20 || a.QuotaObjects != 10 || s.ByCert("client-a") != a || !s.Lookup("ops").Admin {
		t.Fatalf("fields lost: %+v\n%s", a, b)
	}
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	if got, err := s.Authenticate("token-of-a-1234", now); err != nil || got != a {
		t.Fatalf("token lost: %v", err)
	}
	if _, err := s.Authenticate("old-token-of-a", now); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("expiry lost: %v", err)
	}
	if b, err = RemoveTenant(b, "tenant-b"); err != nil {
		t.Fatal(err)
	}
	if s, err = Parse(b); err != nil || s.Lookup("tenant-b") != nil || s.Lookup("tenant-a") == nil || len(s.Tenants()) != 3 {
		t.Fatalf("after removal: %v\n%s", err, b)
	}
	// Taken out and put back: the same tenant, tokens and all.
	out, entry, err := TakeTenant(b, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := Parse(out); s.Lookup("tenant-a") != nil {
		t.Fatal("taken tenant still listed")
	}
	back, err := RestoreTenant(out, entry)
	if err != nil {
		t.Fatal(err)
	}
	s, err = Parse(back)
	if err != nil || s.Lookup("tenant-a") == nil || s.Lookup("tenant-a").QuotaObjects != 10 || s.ByCert("client-a") == nil {
		t.Fatalf("restored: %v\n%s", err, back)
	}
	if got, err := s.Authenticate("token-of-a-1234", now); err != nil || got.Name != "tenant-a" {
		t.Fatalf("restored token: %v", err)
	}
	if _, err := RemoveTenant(b, "tenant-b"); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("removing an unlisted tenant: %v", err)
	}
	for _, q := range []uint64{0, 1 << 63} {
		if _, err := SetQuota(b, "tenant-a", q); !errors.Is(err, ErrPolicy) {
			t.Fatalf("quota %d: %v", q, err)
		}
	}
	if _, err := SetQuota(b, "_x", 1); !errors.Is(err, ErrPolicy) {
		t.Fatalf("a reserved name: %v", err)
	}
	// The last tenant removed: a policy without tenants.
	e, err := RemoveTenant([]byte("version: 1\ntenants: [{name: only}]\n"), "only")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Parse(e); err != nil || len(s.Tenants()) != 0 {
		t.Fatalf("%q: %v", e, err)
	}
}

func TestSourceEdit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "q.yaml")
	if err := os.WriteFile(path, []byte(policyMooncake), 0o640); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var changes int
	src, err := NewSource(ctx, SourceConfig{Load: FileLoader(path), Save: FileSaver(path), OnChange: func(*Set, int64) { changes++ }})
	if err != nil {
		t.Fatal(err)
	}
	gen := src.Generation()
	set, err := src.Edit(ctx, func(b []byte) ([]byte, error) { return SetQuota(b, "tenant-c", 1<<30) })
	if err != nil || set != src.Set() || set.Lookup("tenant-c").QuotaBytes != 1<<30 || src.Generation() != gen+1 || changes != 2 {
		t.Fatalf("edit: %v, gen %d->%d, changes %d", err, gen, src.Generation(), changes)
	}
	// The file holds the change (a reload finds nothing new), with its
	// permissions, and no temporary file is left.
	if changed, err := src.Reload(ctx); changed || err != nil {
		t.Fatalf("reload after an edit: %v %v", changed, err)
	}
	b, _ := os.ReadFile(path)
	if s, err := Parse(b); err != nil || s.Lookup("tenant-c") == nil {
		t.Fatalf("file after the edit: %v\n%s", err, b)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", st.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("files left: %v", ents)
	}
	// A change that fails leaves the policy as it was.
	if _, err := src.Edit(ctx, func(b []byte) ([]byte, error) { return RemoveTenant(b, "nobody") }); !errors.Is(err, ErrNoTenant) {
		t.Fatal(err)
	}
	if _, err := src.Edit(ctx, func([]byte) ([]byte, error) { return []byte("version: 9"), nil }); !errors.Is(err, ErrPolicy) {
		t.Fatalf("an edit to a bad policy: %v", err)
	}
	if src.Set() != set {
		t.Fatal("a failed edit changed the policy in force")
	}
	// Without a Saver.
	ro, err := NewSource(ctx, SourceConfig{Load: FileLoader(path)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Edit(ctx, func(b []byte) ([]byte, error) { return b, nil }); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only: %v", err)
	}
}
