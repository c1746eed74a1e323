package metadata

import (
	"net/url"
	"testing"
)

type urlT = url.URL

func mustURL(t *testing.T, s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return *u
}
