package main

import (
	"errors"
	"testing"
	"time"
)

func TestPutOptionsEx(t *testing.T) {
	o, err := putOptionsEx("")
	if err != nil || o.Replicas != 0 || o.Upsert || o.SoftPin {
		t.Fatalf("empty config: %+v, %v", o, err)
	}
	o, err = putOptionsEx(`{"replica_num":2,"soft_pin":true,"soft_pin_ttl_ms":1500,"with_hard_pin":true,` +
		`"preferred_segments":["a:1"],"prefer_alloc_in_same_node":true,"upsert":true}`)
	if err != nil {
		t.Fatal(err)
	}
	if o.Replicas != 2 || !o.SoftPin || o.SoftPinTTL != 1500*time.Millisecond || !o.HardPin || !o.PreferLocal ||
		!o.Upsert || len(o.PreferredSegments) != 1 || o.PreferredSegments[0] != "a:1" {
		t.Fatalf("parsed %+v", o)
	}
	for _, bad := range []string{`{`, `{"replica_num":-1}`, `{"replica_num":65}`, `{"soft_pin_ttl_ms":-5}`} {
		if _, err := putOptionsEx(bad); !errors.Is(err, errInvalidParams) {
			t.Errorf("%s: got %v, want errInvalidParams", bad, err)
		}
	}
}
