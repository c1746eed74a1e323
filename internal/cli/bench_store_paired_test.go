package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	benchstore "github.com/kvcache-go/mooncake/internal/bench/store"
)

// TestBenchStoreSecurityTable: the on/off column is the median of the
// rounds' paired ratios, next to their quartiles and the ratio of the
// median rounds.
func TestBenchStoreSecurityTable(t *testing.T) {
	row := func(ops int) benchstore.Row {
		return benchstore.Row{Ops: ops, Elapsed: time.Second, CPU: time.Duration(ops) * 10 * time.Microsecond, P50: 5 * time.Microsecond}
	}
	res := &benchstore.SecurityResult{Rows: []benchstore.SecurityRow{{Feature: "grants", Op: "get", Size: 4096, Clients: 1,
		Off: row(1000), On: row(800), Paired: benchstore.Ratios{0.97, 0.95, 0.9, 0.99, 0.96}, CPU: benchstore.Ratios{1.04, 1.05, 1.06}}}}
	var out bytes.Buffer
	printBenchStoreSecurity(&out, res)
	text := out.String()
	var f []string
	for _, line := range strings.Split(text, "\n") {
		if g := strings.Fields(line); len(g) > 0 && g[0] == "grants" {
			f = g
		}
	}
	// grants get 4.0 KiB 1 off on on/off quartiles medians off-cpu on-cpu cpu-on/off p50 p50 errors
	if len(f) != 16 || f[7] != "0.960" || f[8] != "0.950-0.970" || f[9] != "0.800" || f[12] != "1.050" {
		t.Fatalf("row %q in:\n%s", f, text)
	}
	if !strings.Contains(text, "median over the 5 rounds") {
		t.Fatalf("no legend:\n%s", text)
	}
}

// TestBenchStoreGrantsBoth runs `bench store --grants both` briefly: a
// ratio line per phase, its figure the median of the paired ratios of as
// many rounds as were run.
func TestBenchStoreGrantsBoth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two clusters")
	}
	res, err := benchstore.Run(t.Context(), benchstore.Config{Sizes: []int{4096}, Clients: []int{1},
		SegmentSize: 8 << 20, Nodes: 1, Duration: 20 * time.Millisecond, Rounds: 3, Redis: "off", Transport: "tcp",
		Grants: benchstore.GrantsBoth, Ops: []string{"put", "get"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"put", "get"} {
		if p := res.FindGrants(op, 4096, 1); p == nil || len(p.Ops) != 3 || len(p.CPU) != 3 || p.Ops.Median() <= 0 {
			t.Fatalf("paired ratios of %s: %+v", op, p)
		}
	}
	var out bytes.Buffer
	printBenchStore(&out, res)
	text := out.String()
	for _, op := range []string{"put", "get"} {
		if !strings.Contains(text, "  "+op+" 4.0 KiB x1: ops/s ") || !strings.Contains(text, "(medians ") {
			t.Fatalf("no paired ratio of %s:\n%s", op, text)
		}
	}
	if strings.Contains(text, "first error") {
		t.Fatalf("errors:\n%s", text)
	}
}
