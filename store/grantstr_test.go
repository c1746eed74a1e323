package store

import (
	"testing"
	"unsafe"
)

// Equal grant bytes become the same string (a lane recognises a grant it
// sent by its string data); the table stays bounded.
func TestGrantStrings(t *testing.T) {
	var g grantStrings
	if g.of(nil) != "" {
		t.Fatal("no grant: want the empty string")
	}
	a, b := g.of([]byte("grant-one")), g.of([]byte("grant-one"))
	if a != "grant-one" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatal("equal grants: want one string")
	}
	if c := g.of([]byte("grant-two")); c != "grant-two" || unsafe.StringData(c) == unsafe.StringData(a) {
		t.Fatal("another grant: want another string")
	}
	for i := range 3 * maxGrantStrings {
		g.of([]byte{byte(i), byte(i >> 8), 1})
	}
	if len(g.m) > maxGrantStrings {
		t.Fatalf("table holds %d strings, bound %d", len(g.m), maxGrantStrings)
	}
}
