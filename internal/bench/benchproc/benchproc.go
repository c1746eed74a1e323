// Package benchproc holds what the benchmarks that run real server
// processes share: a redis-server of their own on a free loopback port, the
// environment their child processes get, and the parsing of the servers'
// "name=value" readiness lines.
package benchproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrRedisServerMissing: Debian's redis-server is not installed.
var ErrRedisServerMissing = errors.New("redis-server not installed (apt-get install redis-server)")

// Redis is a redis-server a benchmark started.
type Redis struct {
	Addr string // 127.0.0.1:PORT
	PID  int
	stop func()
}

// Stop kills the server and removes its directory.
func (r *Redis) Stop() { r.stop() }

// StartRedis starts redis-server on a free loopback port, without
// persistence or a memory limit, killed with the benchmark if the benchmark
// dies (Pdeathsig), and returns once it logs that it accepts connections
// (its own readiness line; the log is drained to the end so the server
// never blocks on it), within 10 s.
func StartRedis(ctx context.Context) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrRedisServerMissing
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "mooncake-bench-redis")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no", "--maxmemory", "0", "--logfile", "")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ready, done := make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		seen := false
		for sc.Scan() {
			if !seen && strings.Contains(sc.Text(), "Ready to accept connections") {
				seen = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(done)
	}()
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), PID: cmd.Process.Pid,
		stop: func() { _ = cmd.Process.Kill(); <-done; os.RemoveAll(dir) }}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-ready:
		return r, nil
	case <-done:
		r.Stop()
		return nil, errors.New("redis-server exited at start")
	case <-t.C:
		r.Stop()
		return nil, fmt.Errorf("redis-server did not report ready on port %d within 10s", port)
	case <-ctx.Done():
		r.Stop()
		return nil, ctx.Err()
	}
}

// Env is this process's environment without the settings that would point
// the servers it starts elsewhere or lock them (the benchmark's clients
// send no secret).
func Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MOONCAKE_SECRET=") || strings.HasPrefix(kv, "MOONCAKE_MASTER=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// Field returns the value of "name=value" in a space-separated line ("" when
// absent).
func Field(line, name string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}
