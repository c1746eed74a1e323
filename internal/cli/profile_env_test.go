package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestProfileRole(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "mooncake"},
		{[]string{"master", "--port", "0"}, "master"},
		{[]string{"store", "--master", "x"}, "store"},
		{[]string{"bench", "store", "--client-worker", "--master", "x"}, "client"},
		{[]string{"bench", "store", "--sizes", "4KiB"}, "bench-store"},
		{[]string{"bench", "--help"}, "bench"},
	} {
		if got := profileRole(tc.args); got != tc.want {
			t.Errorf("profileRole(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestProfileFromEnv: a prefix writes PREFIX.ROLE-PID.pprof, a profile
// once stopped; no prefix profiles nothing; a prefix in a missing
// directory is an error.
func TestProfileFromEnv(t *testing.T) {
	dir := t.TempDir()
	stop, err := profileFromEnv("", []string{"master"})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("no prefix wrote %d files", len(ents))
	}
	prefix := filepath.Join(dir, "cpu")
	stop, err = profileFromEnv(prefix, []string{"master", "--port", "0"})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	path := fmt.Sprintf("%s.master-%d.pprof", prefix, os.Getpid())
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile %s: %v (want a non-empty file)", path, err)
	}
	if _, err := profileFromEnv(filepath.Join(dir, "missing", "cpu"), []string{"store"}); err == nil {
		t.Fatal("a prefix in a missing directory worked")
	}
}
