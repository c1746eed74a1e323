package store_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDeps: the public store client links no server code. A program that
// uses it must not pull in the master core, the election (and the master it
// runs) or the etcd server; it talks to the master through the wire
// packages only (storepb, leader, storeerr, offsetalloc).
func TestDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const mod = "github.com/kvcache-go/mooncake/"
	forbidden := []string{
		mod + "internal/master",
		mod + "internal/election",
		mod + "internal/etcdtest",
		"go.etcd.io/etcd/server",
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("store depends on %s", d)
			}
		}
	}
	for _, want := range []string{mod + "internal/storepb", mod + "internal/leader", mod + "internal/storeerr", mod + "internal/offsetalloc"} {
		if !slices.Contains(deps, want) {
			t.Errorf("store does not depend on %s (go list output changed shape?)", want)
		}
	}
}
