package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

type proc struct {
	cmd    *exec.Cmd
	url    string
	stderr chan string
	done   chan struct{}
}

// startProc runs the mooncake binary with args; the first stdout line must
// report an http:// address.
func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: make(chan string, 1024), done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case p.stderr <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() { p.stop() })
	select {
	case line := <-lines:
		p.url = regexp.MustCompile(`http://[0-9.:]+`).FindString(line)
		if p.url == "" {
			t.Fatalf("%v: no address in %q", args, line)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%v did not report its address", args)
	}
	return p
}

func (p *proc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.AfterFunc(10*time.Second, func() { p.cmd.Process.Kill() })
	p.cmd.Wait()
	t.Stop()
	<-p.done
}

func (p *proc) kill() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
	<-p.done
}

// stderrMatch waits for a stderr line matching re and returns the first group.
func (p *proc) stderrMatch(t *testing.T, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line := <-p.stderr:
			if m := rx.FindStringSubmatch(line); m != nil {
				return m[1]
			}
		case <-deadline:
			t.Fatalf("no stderr line matching %s", re)
		}
	}
}

func waitHealthy(t *testing.T, url string) {
	t.Helper()
	waitfor.Cond(t, 60*time.Second, url+" healthy", func() bool {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// Proxy, prefill and decode as separate processes of the real binary.
func TestSeparateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "mooncake")
	build := exec.Command("go", "build", "-o", bin, "github.com/kvcache-go/mooncake/cmd/mooncake")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	col := startProc(t, bin, "serve", "--port", "0", "--model", "tiny")
	pre := startProc(t, bin, "serve", "--port", "0", "--model", "tiny", "--role", "producer",
		"--kv-connector", "mooncake", "--kv-connector-config", `{"bootstrap_port":0}`)
	boot := pre.stderrMatch(t, `mooncake connector ready.* bootstrap=(\S+)`)
	dec := startProc(t, bin, "serve", "--port", "0", "--model", "tiny", "--role", "consumer",
		"--kv-connector", "mooncake", "--kv-connector-config", `{"pull_timeout_s":2}`)
	px := startProc(t, bin, "proxy", "--port", "0", "--prefill", pre.url+",bootstrap="+boot, "--decode", dec.url,
		"--health-interval", "100ms")
	for _, u := range []string{col.url, pre.url, dec.url, px.url} {
		waitHealthy(t, u)
	}
	ctx := context.Background()
	for i, p := range prompts {
		want := complete(t, ctx, col.url, p, 10, false)
		got := complete(t, ctx, px.url, p, 10, i%2 == 0)
		if got.Code != 200 || !equalInts(got.TokenIDs, want.TokenIDs) {
			t.Fatalf("prompt %d: proxy %d %v %s, colocated %v", i, got.Code, got.TokenIDs, got.Raw, want.TokenIDs)
		}
	}
	for _, u := range []string{pre.url, dec.url} {
		waitfor.Cond(t, 15*time.Second, "no blocks used on "+u, func() bool { return metricValue(t, u, "mooncake_engine_kv_blocks_used") == 0 })
	}
	if v := metricValue(t, dec.url, "mooncake_engine_external_tokens_total"); v == 0 {
		t.Fatal("decode received no external tokens")
	}

	// Kill prefill: each request either still answers the right tokens
	// (decode recomputes) or gets a clear 503 once the proxy noticed.
	pre.kill()
	p := "after the prefill process died"
	want := complete(t, ctx, col.url, p, 6, false)
	saw503 := false
	waitfor.Cond(t, 30*time.Second, "proxy answers 503 for the dead prefill", func() bool {
		got := complete(t, ctx, px.url, p, 6, false)
		switch {
		case got.Code == 200:
			if !equalInts(got.TokenIDs, want.TokenIDs) {
				t.Fatalf("after kill: %v != %v", got.TokenIDs, want.TokenIDs)
			}
		case got.Code == 503 && strings.Contains(got.Raw, "no healthy prefill instance"):
			saw503 = true
		default:
			t.Fatalf("after kill: %d %s", got.Code, got.Raw)
		}
		return saw503
	})
	waitfor.Cond(t, 15*time.Second, "decode frees everything", func() bool { return metricValue(t, dec.url, "mooncake_engine_kv_blocks_used") == 0 })
}
