package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestBenchStoreHotCacheSmoke runs `bench store --hot-cache` briefly: one
// row per size and client count with both groups measured, and a bad flag
// is a usage error.
func TestBenchStoreHotCacheSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	var out bytes.Buffer
	h := benchHotCacheFlags{on: true, keys: 8, zipf: 1.2, cacheSize: "1MiB"}
	if err := runBenchStoreHotCache(t.Context(), &out, h, []int{4096}, []int{1}, 1, 40*time.Millisecond, "tcp"); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	var row []string
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "4.0" && f[1] == "KiB" {
			row = f
		}
	}
	if len(row) != 16 || row[3] == "0" || row[4] == "0" || strings.Contains(text, "first error") {
		t.Fatalf("row %q in:\n%s", row, text)
	}
	h.zipf = 1
	if err := runBenchStoreHotCache(t.Context(), &out, h, []int{4096}, []int{1}, 1, time.Millisecond, "tcp"); err == nil || !strings.Contains(err.Error(), "Zipf") {
		t.Fatalf("zipf 1: %v", err)
	}
}
