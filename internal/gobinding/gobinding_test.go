package gobinding

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// mirrorRepo is where the project's tooling fetches Mooncake's repository
// (a bare git directory); $MOONCAKE_REPO overrides it.
const mirrorRepo = "/work/.mirror/kvcache-ai+Mooncake/repo"

// mooncakeFiles are the files of Mooncake's Go binding run unchanged.
var mooncakeFiles = []string{
	"mooncake-store/go/tests/integration_test.go",
	"mooncake-store/go/examples/basic/main.go",
}

func root(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// goCmd runs the go tool in dir with env added, bounded by ctx, and returns
// its combined output.
func goCmd(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off"), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// proc is a process of the mooncake binary whose first stdout line
// matched a pattern.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs bin with args and returns the first submatch of re in its
// first stdout line (waiting at most 60 s).
func start(t *testing.T, bin, re string, args ...string) string {
	t.Helper()
	m, err := tryStart(t, bin, re, args...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tryStart is start returning its failure; the process is stopped at the
// end of the test either way.
func tryStart(t *testing.T, bin, re string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return "", err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	first := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			first <- sc.Text()
		}
		close(first)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		_ = cmd.Wait()
	})
	select {
	case line, ok := <-first:
		m := regexp.MustCompile(re).FindStringSubmatch(line)
		if !ok || m == nil {
			return "", fmt.Errorf("%v: first line %q does not match %s", args, line, re)
		}
		return m[1], nil
	case <-time.After(60 * time.Second):
		return "", fmt.Errorf("%v did not report its address in 60s", args)
	}
}

// portFree reports whether 127.0.0.1:port can be bound now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// mooncakeCopy writes Mooncake's files from the fetched copy under dir and
// returns "" or why it could not.
func mooncakeCopy(dir string) string {
	repo := os.Getenv("MOONCAKE_REPO")
	if repo == "" {
		repo = mirrorRepo
	}
	if _, err := os.Stat(repo); err != nil {
		return "no fetched copy of Mooncake's repository (set MOONCAKE_REPO to a checkout or bare git directory)"
	}
	for _, f := range mooncakeFiles {
		var b []byte
		var err error
		if b, err = os.ReadFile(filepath.Join(repo, f)); err != nil {
			b, err = exec.Command("git", "--git-dir", repo, "show", "HEAD:"+f).Output()
		}
		if err != nil {
			return fmt.Sprintf("%s not in %s: %v", f, repo, err)
		}
		dst := filepath.Join(dir, strings.TrimPrefix(f, "mooncake-store/go/"))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err.Error()
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err.Error()
		}
	}
	return ""
}

func TestGoBinding(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the go tool")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool on PATH")
	}
	top := root(t)
	binding := filepath.Join(top, "binding", "go")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "mooncake")
	if out, err := goCmd(ctx, top, nil, "build", "-o", bin, "./cmd/mooncake"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// Mooncake's integration test dials localhost:50051; take that port
	// when it is free.
	masterArgs := []string{"master", "--http-port", "-1", "--port"}
	why := "127.0.0.1:50051 is in use: Mooncake's integration test dials it"
	var addr string
	if portFree(50051) {
		var err error
		if addr, err = tryStart(t, bin, `grpc=(\S+)`, append(masterArgs, "50051")...); err == nil {
			why = ""
		} else {
			t.Logf("master on 50051: %v", err) // taken meanwhile
		}
	}
	if why != "" {
		addr = start(t, bin, `grpc=(\S+)`, append(masterArgs, "0")...)
	}
	start(t, bin, `(\S+)`, "store", "--master", addr, "--segment-size", "256MiB", "--http-port", "-1")
	env := []string{"MC_MASTER_ADDR=" + addr}

	t.Run("own", func(t *testing.T) {
		// The binding and everything it builds on build without cgo.
		out, err := goCmd(ctx, binding, []string{"CGO_ENABLED=0"}, "list", "-e", "-deps", "-f",
			"{{if or .CgoFiles .Error .DepsErrors}}{{.ImportPath}} {{.CgoFiles}} {{.Error}}{{end}}", "./...")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Fatalf("with CGO_ENABLED=0: %q (%v)", out, err)
		}
		out, err = goCmd(ctx, binding, env, "test", "-count=1", "-v", "./...")
		t.Logf("binding/go tests:\n%s", out)
		if err != nil || !strings.Contains(out, "--- PASS: TestWholeAPI") {
			t.Fatalf("binding/go tests: %v", err)
		}
	})

	t.Run("mooncake", func(t *testing.T) {
		if why != "" {
			t.Skip(why)
		}
		dir := t.TempDir()
		if why := mooncakeCopy(dir); why != "" {
			t.Skip(why)
		}
		mod := fmt.Sprintf(`module mooncake-go-programs

go 1.23

require github.com/kvcache-ai/Mooncake/mooncake-store/go v0.0.0

replace (
	github.com/kvcache-ai/Mooncake/mooncake-store/go => %s
	github.com/kvcache-go/mooncake => %s
)
`, binding, top)
		sum, err := os.ReadFile(filepath.Join(binding, "go.sum"))
		if err == nil {
			err = errors.Join(os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644),
				os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := goCmd(ctx, dir, env, "test", "-count=1", "-v", "./tests/")
		t.Logf("Mooncake's tests/integration_test.go:\n%s", out)
		for _, name := range []string{"TestPutGetRoundTrip", "TestBatchExists", "TestRemoveAll", "TestHostname", "TestReplicateConfig"} {
			if !strings.Contains(out, "--- PASS: "+name) {
				t.Errorf("%s did not pass", name)
			}
		}
		if err != nil {
			t.Fatalf("Mooncake's integration test: %v", err)
		}
		// The example ends with a non-forced Remove right after its Get:
		// the Get's read lease (10 s here, Mooncake's default_kv_lease_ttl
		// 5 s there) refuses it with OBJECT_HAS_LEASE on Mooncake's master
		// as on ours, so every step up to it must pass and that one fail so.
		out, err = goCmd(ctx, dir, env, "run", "./examples/basic")
		t.Logf("Mooncake's examples/basic:\n%s", out)
		for _, want := range []string{"Connected to Mooncake Store", "Exists(hello_from_go) = true",
			"GetSize(hello_from_go) = 16 bytes", "Get: hello_from_go => Hello, Mooncake!",
			"Remove: mooncakestore: remove failed: store: remove \"hello_from_go\": store: master: object has a lease"} {
			if !strings.Contains(out, want) {
				t.Errorf("Mooncake's example (%v): no %q", err, want)
			}
		}
	})
}
