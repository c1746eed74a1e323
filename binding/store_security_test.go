package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/kvcache-go/mooncake/store"
)

// TestSecurityTenantID: mc_store_open_ex's "tenant_id" option names the
// tenant, MOONCAKE_TENANT_ID fills it when empty, and a malformed name
// fails setup as INVALID_PARAMS before anything is opened.
func TestSecurityTenantID(t *testing.T) {
	parse := func(opts string) securityArgs {
		var o openExArgs
		if err := json.Unmarshal([]byte(opts), &o); err != nil {
			t.Fatal(err)
		}
		return o.securityArgs
	}
	t.Setenv("MOONCAKE_TENANT_ID", "")
	t.Setenv("MOONCAKE_TENANT_TOKEN", "")
	sec, err := parse(`{"tenant_id":"tenant-a","token":"tok-0001"}`).resolve()
	if err != nil || sec.tenantID != "tenant-a" || sec.token != "tok-0001" {
		t.Fatalf("resolve = %+v, %v; want tenant-a, tok-0001", sec, err)
	}
	if sec, err := parse(`{}`).resolve(); err != nil || sec.tenantID != "" {
		t.Fatalf("no tenant_id: %+v, %v; want none", sec, err)
	}
	t.Setenv("MOONCAKE_TENANT_ID", "tenant-b")
	if sec, err := parse(`{}`).resolve(); err != nil || sec.tenantID != "tenant-b" {
		t.Fatalf("MOONCAKE_TENANT_ID: %+v, %v; want tenant-b", sec, err)
	}
	if sec, err := parse(`{"tenant_id":"tenant-a"}`).resolve(); err != nil || sec.tenantID != "tenant-a" {
		t.Fatalf("option over env: %+v, %v; want tenant-a", sec, err)
	}
	for _, bad := range []string{"_admin", "a/b", "a\x01", string(make([]byte, 65))} {
		b, _ := json.Marshal(map[string]string{"tenant_id": bad})
		_, err := parse(string(b)).resolve()
		if !errors.Is(err, errInvalidParams) || codeOf(err) != codeInvalidParams {
			t.Errorf("tenant_id %q: err %v, want INVALID_PARAMS", bad, err)
		}
	}
	t.Setenv("MOONCAKE_TENANT_ID", "bad/name")
	if _, err := parse(`{}`).resolve(); !errors.Is(err, errInvalidParams) {
		t.Errorf("MOONCAKE_TENANT_ID bad/name: err %v, want INVALID_PARAMS", err)
	}
}

// TestTenantCodes: a tenant's refused puts cross the ABI with Mooncake's codes.
func TestTenantCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int64
	}{{store.ErrQuotaExceeded, -1700}, {store.ErrTenantNotRegistered, -1701},
		{&store.RemoteError{Code: -1700, Message: "over quota"}, -1700},
		{&store.RemoteError{Code: -1701, Message: "not registered"}, -1701}} {
		if got := codeOf(fmt.Errorf("put: %w", tc.err)); got != tc.want {
			t.Errorf("codeOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
