package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/etcdtest"
)

// startCmd runs a long-lived command in process and returns the first line
// it prints and a function that stops it (idempotent; also at cleanup).
func startCmd(t *testing.T, args ...string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, args, pw, io.Discard)
		pw.Close()
		done <- err
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	t.Cleanup(stop)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case line := <-lines:
		return line, stop
	case <-time.After(30 * time.Second):
		t.Fatalf("%v printed nothing", args)
	}
	return "", stop
}

func role(httpAddr string) string {
	resp, err := http.Get("http://" + httpAddr + "/role")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var r struct{ Role string }
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return r.Role
}

// TestMasterHACLI: two `mooncake master --ha` candidates, a storage node and
// put/get all addressing the cluster as etcd://; the leader stops, the
// standby takes over, the node remounts, and put/get work again.
func TestMasterHACLI(t *testing.T) {
	ep, _ := etcdtest.Start(t)
	addr := "etcd://" + ep + "/clitest"
	httpRE := regexp.MustCompile(`http=(\S+)`)
	var https []string
	var stops []func()
	for range 2 {
		line, stop := startCmd(t, "master", "--ha", "--durable-metadata=false", "--etcd", ep, "--cluster", "clitest", "--ha-lease", "1s",
			"--host", "127.0.0.1", "--port", "0", "--http-port", "0", "--client-ttl", "2s")
		m := httpRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("master printed %q", line)
		}
		https, stops = append(https, m[1]), append(stops, stop)
	}
	leader := -1
	deadline := time.Now().Add(15 * time.Second)
	for leader < 0 {
		for i, h := range https {
			if role(h) == "leader" {
				leader = i
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader elected")
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	if role(https[1-leader]) != "follower" {
		t.Fatalf("standby role %q", role(https[1-leader]))
	}
	_, stopNode := startCmd(t, "store", "--master", addr, "--segment-size", "1MiB", "--transport", "tcp",
		"--ping-interval", "50ms", "--unmount-grace", "100ms", "--http-port", "-1")
	defer stopNode()

	dir := t.TempDir()
	put := func(key, content string) {
		t.Helper()
		f := filepath.Join(dir, key)
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		// Right after a failover the node may not have remounted yet: retry.
		deadline := time.Now().Add(15 * time.Second)
		for {
			code, err := Run(context.Background(), []string{"put", "--master", addr, key, f}, io.Discard, io.Discard)
			if code == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("put %s: %d %v", key, code, err)
			}
			time.Sleep(50 * time.Millisecond) // retry interval
		}
	}
	get := func(key string) (string, int) {
		var out bytes.Buffer
		code, err := Run(context.Background(), []string{"get", "--master", addr, key, "-"}, &out, io.Discard)
		if code != 0 && (err == nil || !strings.Contains(err.Error(), "no such key")) {
			t.Fatalf("get %s: %d %v", key, code, err)
		}
		return out.String(), code
	}
	put("a", "alpha")
	if got, code := get("a"); code != 0 || got != "alpha" {
		t.Fatalf("get a: %d %q", code, got)
	}
	// mooncake status names the role and the leader on both candidates.
	for i, h := range https {
		var out bytes.Buffer
		code, err := Run(context.Background(), []string{"status", "--master", h}, &out, io.Discard)
		want := "(HA follower, leader 127.0.0.1:"
		if i == leader {
			want = "(HA leader, leader 127.0.0.1:"
		}
		if code != 0 || !strings.Contains(out.String(), want) || (i == leader) != strings.Contains(out.String(), "objects 1 ") {
			t.Fatalf("status of candidate %d: %d %v\n%s", i, code, err, out.String())
		}
	}
	stops[leader]() // the leader stops (resigns): the standby takes over
	deadline = time.Now().Add(15 * time.Second)
	for role(https[1-leader]) != "leader" {
		if time.Now().After(deadline) {
			t.Fatal("standby did not take over")
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	if got, code := get("a"); code != 1 {
		t.Fatalf("get of a key from before the failover: %d %q (the new leader starts empty)", code, got)
	}
	put("b", "beta")
	if got, code := get("b"); code != 0 || got != "beta" {
		t.Fatalf("get b: %d %q", code, got)
	}
	if code, err := Run(context.Background(), []string{"master", "--ha", "--port", "0"}, io.Discard, io.Discard); code != 2 {
		t.Fatalf("--ha without --etcd: %d %v", code, err)
	}
}
