package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// RunSecurity runs the chosen comparisons only, each row measured on both
// pools without errors, and refuses an unknown one.
func TestRunSecurityFeatures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := RunSecurity(ctx, SecurityConfig{Sizes: []int{4096}, Clients: []int{1}, Rounds: 1, Duration: time.Millisecond,
		Features: []string{"grants", "nope"}}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown feature: err = %v", err)
	}
	res, err := RunSecurity(ctx, SecurityConfig{Sizes: []int{4096}, Clients: []int{1}, Rounds: 2, Duration: 20 * time.Millisecond,
		Features: []string{"grants"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.Rows {
		got = append(got, r.Feature+"/"+r.Op)
		if r.Off.Ops == 0 || r.On.Ops == 0 || r.Off.Errors+r.On.Errors != 0 || len(r.Paired) != 2 {
			t.Fatalf("%s %s: off %d ops, on %d ops, %d errors, %d paired ratios", r.Feature, r.Op, r.Off.Ops, r.On.Ops, r.Off.Errors+r.On.Errors, len(r.Paired))
		}
	}
	if strings.Join(got, " ") != "grants/put grants/get" {
		t.Fatalf("rows %v, want grants/put grants/get", got)
	}
}
