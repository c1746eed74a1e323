package main

import (
	"testing"
	"time"
)

// TestSoftPinPreserve: put_ex's keep_soft_pin (Python's SoftPinAction
// PRESERVE) keeps a key's soft pin across an upsert; DISABLE drops it.
func TestSoftPinPreserve(t *testing.T) {
	if o, err := putOptions(`{"keep_soft_pin":true}`); err != nil || !o.KeepSoftPin {
		t.Fatalf("keep_soft_pin: %+v %v", o, err)
	}
	if o, _ := putOptions(`{"keep_soft_pin":true,"soft_pin":true}`); o.KeepSoftPin {
		t.Fatal("ENABLE and PRESERVE at once: ENABLE wins")
	}
	s := inProcessStore(t)
	pin, _ := putOptions(`{"soft_pin":true,"soft_pin_ttl_ms":3600000}`)
	if err := s.put("sp", []byte("v1"), pin); err != nil {
		t.Fatal(err)
	}
	first, err := s.c.Stat(t.Context(), "sp")
	if err != nil || first.SoftPinUntil.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("pinned put: %+v %v", first, err)
	}
	keep, _ := putOptions(`{"upsert":true,"keep_soft_pin":true}`)
	if err := s.put("sp", []byte("v2"), keep); err != nil {
		t.Fatal(err)
	}
	if got, err := s.c.Stat(t.Context(), "sp"); err != nil || !got.SoftPinUntil.Equal(first.SoftPinUntil) {
		t.Fatalf("PRESERVE: pinned until %v, want %v (%v)", got.SoftPinUntil, first.SoftPinUntil, err)
	}
	disable, _ := putOptions(`{"upsert":true}`)
	if err := s.put("sp", []byte("v3"), disable); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.c.Stat(t.Context(), "sp"); !got.SoftPinUntil.IsZero() {
		t.Fatalf("DISABLE: pinned until %v", got.SoftPinUntil)
	}
	if v, _ := s.get("sp"); string(v) != "v3" {
		t.Fatalf("value %q", v)
	}
}
