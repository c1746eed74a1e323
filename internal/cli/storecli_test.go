package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestParseFormatSize(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"4096", 4096, true},
		{"64KiB", 64 << 10, true},
		{"1.5MiB", 3 << 19, true},
		{"4GiB", 4 << 30, true},
		{"4gb", 4 << 30, true},
		{"512M", 512 << 20, true},
		{" 2 g ", 2 << 30, true},
		{"", 0, false},
		{"-1", 0, false},
		{"lots", 0, false},
		{"1e30", 0, false},
	}
	for _, tc := range tests {
		got, err := parseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 19: "1.5 MiB", 4 << 30: "4.0 GiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// proc is a mooncake subprocess whose stdout lines are readable with a deadline.
type proc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
	done   chan struct{}
	mu     sync.Mutex // guards stderr
}

func (p *proc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, lines: make(chan string, 64), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	go func() {
		b := bufio.NewScanner(pr)
		for b.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(b.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitLine returns the first stdout line matching re, or fails after d.
func (p *proc) waitLine(t *testing.T, re *regexp.Regexp, d time.Duration) []string {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("process exited before printing %v; stderr:\n%s", re, p.stderrText())
			}
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timer.C:
			t.Fatalf("no line matching %v within %v", re, d)
		}
	}
}

// run executes one CLI command and returns stdout, stderr and the exit code.
func run(t *testing.T, bin string, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// TestStoreCLIProcesses starts a real master and two storage nodes as
// processes and drives put/get/ls/stat/rm from other processes; then kills
// a node holding a replica and reads from the survivor.
func TestStoreCLIProcesses(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	m := startProc(t, bin, "master", "--host", "127.0.0.1", "--port", "0", "--http-port", "0", "--client-ttl", "3s")
	addr := m.waitLine(t, regexp.MustCompile(`grpc=(\S+) http=(\S+)`), 30*time.Second)
	grpcAddr := addr[1]
	var nodes []*proc
	for range 2 {
		n := startProc(t, bin, "store", "--master", grpcAddr, "--segment-size", "8MiB", "--ping-interval", "100ms", "--unmount-grace", "100ms")
		m := n.waitLine(t, regexp.MustCompile(`store node mounted segment=(\S+) .* http=(\S+)`), 30*time.Second)
		resp, err := http.Get("http://" + m[2] + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("node /health: %d", resp.StatusCode)
		}
		nodes = append(nodes, n)
	}
	mc := []string{"--master", grpcAddr}
	file := filepath.Join(dir, "in.bin")
	data := bytes.Repeat([]byte("mooncake-"), 100000) // ~879 KiB
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}

	out, errOut, code := run(t, bin, nil, append([]string{"put", "--replicas", "2", "blob/1", file}, mc...)...)
	if code != 0 || !strings.Contains(out, "2 replica(s)") || !strings.Contains(out, "KiB") {
		t.Fatalf("put: code %d out %q err %q", code, out, errOut)
	}
	out, _, code = run(t, bin, []byte("hello from stdin"), append([]string{"put", "--replicas", "2", "small", "-"}, mc...)...)
	if code != 0 {
		t.Fatalf("put from stdin: %d %q", code, out)
	}
	out, _, code = run(t, bin, nil, append([]string{"put", "--replicas", "5", "five", file}, mc...)...)
	if code != 0 || !strings.Contains(out, "best effort") {
		t.Fatalf("put with too many replicas: %d %q", code, out)
	}
	out, _, code = run(t, bin, nil, append([]string{"get", "small"}, mc...)...)
	if code != 0 || out != "hello from stdin" {
		t.Fatalf("get to stdout: %d %q", code, out)
	}
	outFile := filepath.Join(dir, "out.bin")
	if _, e, code := run(t, bin, nil, append([]string{"get", "blob/1", outFile}, mc...)...); code != 0 {
		t.Fatalf("get to file: %d %s", code, e)
	}
	if got, _ := os.ReadFile(outFile); !bytes.Equal(got, data) {
		t.Fatal("get returned different bytes")
	}
	_, errOut, code = run(t, bin, nil, append([]string{"get", "nope"}, mc...)...)
	if code != 1 || !strings.Contains(errOut, "nope: no such key") {
		t.Fatalf("get of missing key: code %d stderr %q", code, errOut)
	}
	out, _, code = run(t, bin, nil, append([]string{"ls"}, mc...)...)
	if code != 0 || !strings.Contains(out, "blob/1") || !strings.Contains(out, "small") || strings.Index(out, "blob/1") > strings.Index(out, "small") {
		t.Fatalf("ls: %d %q", code, out)
	}
	out, _, _ = run(t, bin, nil, append([]string{"ls", "-q", "blob/"}, mc...)...)
	if out != "blob/1\n" {
		t.Fatalf("ls prefix: %q", out)
	}
	out, _, code = run(t, bin, nil, append([]string{"stat", "blob/1"}, mc...)...)
	if code != 0 || !strings.Contains(out, "replicas:  2") || !strings.Contains(out, fmt.Sprintf("(%d bytes)", len(data))) {
		t.Fatalf("stat: %d %q", code, out)
	}

	// Kill -9 one node: the replicated blob is still served from the other.
	if err := nodes[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-nodes[0].done
	if _, e, code := run(t, bin, nil, append([]string{"get", "blob/1", outFile}, mc...)...); code != 0 {
		t.Fatalf("get after node kill: %d %s", code, e)
	}
	if got, _ := os.ReadFile(outFile); !bytes.Equal(got, data) {
		t.Fatal("get after node kill returned different bytes")
	}
	// The master drops the dead node (client TTL 3s).
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _, _ = run(t, bin, nil, append([]string{"stat", "blob/1"}, mc...)...)
		if strings.Contains(out, "replicas:  1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("master kept the dead node's replica: %q", out)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}

	if out, _, code = run(t, bin, nil, append([]string{"get", "small"}, mc...)...); code != 0 || out != "hello from stdin" {
		t.Fatalf("get from the surviving replica: %d %q", code, out)
	}
	_, errOut, code = run(t, bin, nil, append([]string{"rm", "small"}, mc...)...)
	if code != 1 || !strings.Contains(errOut, "leased") { // read a moment ago: the lease protects it
		t.Fatalf("rm of leased key: %d %q", code, errOut)
	}
	out, _, code = run(t, bin, nil, append([]string{"rm", "--force", "small"}, mc...)...)
	if code != 0 || !strings.Contains(out, "removed small") {
		t.Fatalf("rm: %d %q", code, out)
	}
	_, errOut, code = run(t, bin, nil, append([]string{"rm", "small"}, mc...)...)
	if code == 0 || !strings.Contains(errOut, "no such key") {
		t.Fatalf("rm of missing: %d %q", code, errOut)
	}
	out, _, code = run(t, bin, nil, append([]string{"rm", "--all", "--force"}, mc...)...)
	if code != 0 || !strings.Contains(out, "removed 2 object(s)") {
		t.Fatalf("rm --all: %d %q", code, out)
	}
	if _, _, code := run(t, bin, nil, append([]string{"rm"}, mc...)...); code != 2 {
		t.Fatalf("rm without target: exit %d, want 2", code)
	}
	// An unreachable master fails fast with the reason.
	_, errOut, code = run(t, bin, nil, "get", "x", "--master", "127.0.0.1:1", "--timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "register with master 127.0.0.1:1") || !strings.Contains(errOut, "nothing listens at 127.0.0.1:1: start `mooncake master`") {
		t.Fatalf("unreachable master: %d %q", code, errOut)
	}

	// Master restart on the same port: the surviving node remounts and
	// re-reports its objects, the old key reads back intact, and new puts work.
	if out, _, code = run(t, bin, nil, append([]string{"put", "before-restart", file}, mc...)...); code != 0 {
		t.Fatalf("put before restart: %d %q", code, out)
	}
	if err := m.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-m.done
	_, port, _ := net.SplitHostPort(grpcAddr)
	m2 := startProc(t, bin, "master", "--host", "127.0.0.1", "--port", port, "--http-port", "0")
	admin := m2.waitLine(t, regexp.MustCompile(`grpc=(\S+) http=(\S+)`), 30*time.Second)[2]
	deadline = time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/get_all_segments")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Count(string(body), `"name"`) == 1 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the surviving node did not remount on the restarted master")
		}
		time.Sleep(50 * time.Millisecond) // poll
	}
	// Durable metadata (the default): the node re-reported the object, which
	// reads back with its bytes intact.
	beforeFile := filepath.Join(dir, "before.bin")
	if _, errOut, code = run(t, bin, nil, append([]string{"get", "before-restart", beforeFile}, mc...)...); code != 0 {
		t.Fatalf("get after master restart: %d %q (the node re-reports its objects)", code, errOut)
	}
	if got, _ := os.ReadFile(beforeFile); !bytes.Equal(got, data) {
		t.Fatal("an object from before the master restart came back with different bytes")
	}
	if out, _, code = run(t, bin, nil, append([]string{"put", "after-restart", file}, mc...)...); code != 0 {
		t.Fatalf("put after restart: %d %q", code, out)
	}
	if _, e, code := run(t, bin, nil, append([]string{"get", "after-restart", outFile}, mc...)...); code != 0 {
		t.Fatalf("get after restart: %d %s", code, e)
	}
	if got, _ := os.ReadFile(outFile); !bytes.Equal(got, data) {
		t.Fatal("get after master restart returned different bytes")
	}
}
