package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/bench/benchproc"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server placements (Config.Servers).
const (
	ServersInProcess = "inproc"  // master and storage nodes in the bench process (the default)
	ServersProcess   = "process" // master and storage nodes as their own mooncake processes
	ServersBoth      = "both"    // both, alternated round by round
)

// System names of the rows.
const (
	SystemInProcess = "mooncake"        // servers in the bench process
	SystemProcess   = "mooncake-proc"   // servers as their own processes, as redis-server is
	SystemGrants    = "mooncake-grants" // in this process, data-path grants on
	SystemRedis     = "redis"
	// SystemRedisProcs: Redis measured by as many redis-benchmark
	// processes as clients, one connection each (Config.ClientProcs), the
	// topology of SystemClientProcs.
	SystemRedisProcs = "redis-cproc"
)

// startTimeout bounds how long a server process may take to print its
// first line (the addresses it bound).
const startTimeout = 20 * time.Second

// serverProc is one mooncake server process of the benchmark.
type serverProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when Wait returned
}

// startProc runs bin with args and returns once the process printed a
// first line starting with want; the line is returned. The process gets
// SIGTERM when stopped (stop) and is killed 5 s later.
func startProc(ctx context.Context, bin, want string, args ...string) (*serverProc, string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = benchproc.Env()
	cmd.Stderr = io.Discard
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s %s: %w", bin, args[0], err)
	}
	p := &serverProc{cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		first := ""
		if sc.Scan() {
			first = sc.Text()
		}
		lines <- first
		_, _ = io.Copy(io.Discard, out) // keep the pipe drained until the process ends
		_ = cmd.Wait()
		close(p.done)
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, want) {
			p.stop()
			return nil, "", fmt.Errorf("%s %s: first line %q, want %q...", bin, args[0], line, want)
		}
		return p, line, nil
	case <-t.C:
		p.stop()
		return nil, "", fmt.Errorf("%s %s: no first line within %v", bin, args[0], startTimeout)
	case <-ctx.Done():
		p.stop()
		return nil, "", ctx.Err()
	}
}

// stop sends SIGTERM and waits for the process, killing it after 5 s.
func (p *serverProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startServerProcs starts `bin master` and nodes `bin store` processes and
// returns the master's address, a function that stops them all (nodes
// first, so that they unmount) and their process IDs.
func startServerProcs(ctx context.Context, bin string, nodes int, segSize uint64, transport string) (addr string, stop func(), pids []int, err error) {
	if bin == "" {
		return "", nil, nil, errors.New("bench store: separate-process servers need the mooncake binary (Config.Binary)")
	}
	var procs []*serverProc
	stop = func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}
	m, line, err := startProc(ctx, bin, "master listening", "master", "--host", "127.0.0.1", "--port", "0", "--http-port", "-1")
	if err != nil {
		return "", nil, nil, err
	}
	procs = append(procs, m)
	addr = benchproc.Field(line, "grpc")
	if addr == "" {
		stop()
		return "", nil, nil, fmt.Errorf("master: no grpc= in %q", line)
	}
	for range nodes {
		n, _, err := startProc(ctx, bin, "store node mounted", "store", "--master", addr,
			"--segment-size", strconv.FormatUint(segSize, 10), "--transport", transport,
			"--http-port", "-1", "--unmount-grace", "100ms")
		if err != nil {
			stop()
			return "", nil, nil, err
		}
		procs = append(procs, n)
	}
	for _, p := range procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return addr, stop, pids, nil
}

// procCPU is the CPU time (user + system) processes pids spent so far, from
// /proc/PID/stat (clock ticks: 10 ms steps); 0 where it cannot be read.
func procCPU(pids ...int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The command name (field 2) is in parentheses and may hold
		// spaces: count fields after its closing one.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14, utime
		st, err2 := strconv.ParseInt(f[12], 10, 64) // field 15, stime
		if err1 != nil || err2 != nil {
			continue
		}
		total += time.Duration(ut+st) * time.Second / clockTicks
	}
	return total
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat times
// (100 on every Linux architecture Go supports).
const clockTicks = 100
