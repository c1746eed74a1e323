package cli

import (
	"context"
	"io"
	"strings"
	"testing"
)

// The soak itself needs root and namespaces (internal/bench/soak, make
// chaos); here only its flags are checked, before any bed is made.
func TestBenchSoakBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--duration", "0s"},
		{"--duration", "1m", "--workers", "0"},
		{"--duration", "1m", "--store-value", "8"},
		{"--duration", "soon"},
	} {
		code, err := Run(context.Background(), append([]string{"bench", "soak"}, args...), io.Discard, io.Discard)
		if code == 0 || err == nil {
			t.Errorf("%s: accepted", strings.Join(args, " "))
		}
	}
}
