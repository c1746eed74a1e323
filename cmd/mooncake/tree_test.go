package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedFile is the largest file the repository may track outside
// testdata directories.
const maxTrackedFile = 2 << 20

// TestNoBuildOutputsTracked: no tracked file is an executable or library
// (ELF) or larger than 2 MB outside testdata: build outputs belong in
// .gitignore, not in the history every clone downloads.
func TestNoBuildOutputsTracked(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("git ls-files: %v", err)
		}
		t.Skipf("not a git checkout: %v", err)
	}
	n := 0
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" || strings.Contains("/"+name, "/testdata/") {
			continue
		}
		path := filepath.Join(root, name)
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		n++
		if fi.Size() > maxTrackedFile {
			t.Errorf("%s: %d bytes tracked (limit %d outside testdata)", name, fi.Size(), maxTrackedFile)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 4)
		k, _ := f.Read(head)
		f.Close()
		if bytes.Equal(head[:k], []byte("\x7fELF")) {
			t.Errorf("%s: an ELF binary is tracked", name)
		}
	}
	if n == 0 {
		t.Fatal("no tracked files found")
	}
}
