package main

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kvcache-go/mooncake/internal/dummyclient"
	"github.com/kvcache-go/mooncake/store"
)

// TestStoreDummy drives a dummy store handle (setup_dummy) served by a real
// store client through the dummy-client server, as `mooncake client` does.
func TestStoreDummy(t *testing.T) {
	real := inProcessStore(t)
	addr := serveDummy(t, real)

	if _, err := openDummy(t.Context(), 1<<20, ""); err == nil {
		t.Fatal("setup_dummy without an address must fail")
	}
	d, err := openDummy(t.Context(), 4<<20, addr)
	if err != nil {
		t.Fatal(err)
	}
	h := stores.add(d)
	defer func() {
		if s, ok := stores.remove(h); ok {
			_ = s.close()
		}
	}()
	if d.hostname() != real.hostname() {
		t.Fatalf("dummy hostname %q, real %q", d.hostname(), real.hostname())
	}
	// inline values
	if err := d.put("dk", []byte("dummy value"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, err := real.get("dk"); err != nil || string(v) != "dummy value" {
		t.Fatalf("real get: %q %v", v, err)
	}
	// pool memory, registered: moved in place
	pool := d.c.(*dummyclient.Client)
	src, dst := pool.Alloc(1<<20), pool.Alloc(1<<20)
	registerPattern(t, d, 7, src, dst)
	if err := d.put("pooled", src, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.getInto("pooled", dst); err != nil || n != len(src) || !bytes.Equal(dst, src) {
		t.Fatalf("getInto pool: %d %v", n, err)
	}
	if _, err := d.get("missing"); codeOf(err) != codeObjectNotFound {
		t.Fatalf("missing: %v (code %d)", err, codeOf(err))
	}
	if ok, err := d.exist("pooled"); err != nil || !ok {
		t.Fatalf("exist %v %v", ok, err)
	}
	if n, err := d.size("pooled"); err != nil || n != 1<<20 {
		t.Fatalf("size %d %v", n, err)
	}
	if errs := d.batchRemove([]string{"dk", "missing"}, true); errs[0] != nil || !errors.Is(errs[1], store.ErrNotFound) {
		t.Fatalf("batch remove %v", errs)
	}
	if a, err := allocFromPool(h, 4096); err != nil || a == nil {
		t.Fatalf("alloc_from_mem_pool on a dummy handle: %p %v", a, err)
	}
	if _, err := allocFromPool(h, 1<<40); err == nil {
		t.Fatal("alloc_from_mem_pool past the pool must fail")
	}
}
