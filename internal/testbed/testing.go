package testbed

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// ForTest makes a bed of n hosts running bin for t, skipping t with the
// reason when namespaces cannot be made here, and removing the bed at t's
// cleanup (also when t fails).
func ForTest(t testing.TB, n int, bin string) *Bed {
	t.Helper()
	if err := Supported(); err != nil {
		t.Skip(err)
	}
	b, err := New(context.Background(), Config{Hosts: n, Binary: bin, Logger: slog.New(slog.DiscardHandler)})
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
	buildDir  string
)

// Binary builds cmd/mooncake once per test process and returns its path. The file is removed when the
// process exits via RemoveBinary in TestMain, or left in the temp dir.
func Binary(t testing.TB) string {
	t.Helper()
	if err := Supported(); err != nil {
		t.Skip(err)
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "mctb-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "mooncake")
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		args := []string{"build", "-o", buildBin} // no -race: timings stay those of a release build
		out, err := exec.CommandContext(context.Background(), goBin, append(args, "github.com/kvcache-go/mooncake/cmd/mooncake")...).CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// RemoveBinary removes what Binary built (call from TestMain after m.Run).
func RemoveBinary() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Main is the TestMain of a package whose tests use Binary: it runs the
// tests, removes the binary and exits with their status.
func Main(m *testing.M) {
	code := m.Run()
	RemoveBinary()
	os.Exit(code)
}
