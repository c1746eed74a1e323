package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrExited is returned by WaitLine when the process exited first.
var ErrExited = errors.New("testbed: process exited")

const maxLines = 20000 // lines of output kept per process

// Proc is one process of the binary running on a host.
type Proc struct {
	Host *Host
	Args []string
	cmd  *exec.Cmd
	done chan struct{}

	mu      sync.Mutex
	lines   []string // stdout and stderr, interleaved
	dropped int      // lines dropped from the front
	changed chan struct{}
}

// Start runs the bed's binary with args on h, in h's network namespace and
// a UTS namespace whose hostname is h.Name. The process is killed by Close
// (and by the kernel if the caller dies).
func (h *Host) Start(ctx context.Context, args ...string) (*Proc, error) {
	b := h.bed
	if b.cfg.Binary == "" {
		return nil, errors.New("testbed: Config.Binary not set")
	}
	argv := append([]string{"netns", "exec", h.NS, "unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, h.Name, b.cfg.Binary}, args...)
	cmd := exec.Command("ip", argv...) // ip, unshare and sh all exec: the pid is the binary's
	// its own process group: job-control signals aimed at ours never reach it
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	p := &Proc{Host: h, Args: args, cmd: cmd, done: make(chan struct{}), changed: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, errors.New("testbed: closed")
	}
	if err := cmd.Start(); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	b.procs = append(b.procs, p)
	b.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.read(stdout) }()
	go func() { defer wg.Done(); p.read(stderr) }()
	go func() {
		wg.Wait()
		_ = cmd.Wait()
		close(p.done)
		p.notify()
	}()
	b.log.Debug("testbed start", "host", h.Name, "pid", cmd.Process.Pid, "args", args)
	return p, nil
}

func (p *Proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		if len(p.lines) > maxLines {
			n := len(p.lines) - maxLines/2
			p.lines = append([]string(nil), p.lines[n:]...)
			p.dropped += n
		}
		p.mu.Unlock()
		p.notify()
	}
	_, _ = io.Copy(io.Discard, r)
}

func (p *Proc) notify() {
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// WaitLine returns the submatches of the first output line (stdout or
// stderr, from the start) matching re; it fails when the process exits
// first or ctx ends.
func (p *Proc) WaitLine(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	next := 0
	for {
		p.mu.Lock()
		if next < p.dropped {
			next = p.dropped
		}
		for ; next-p.dropped < len(p.lines); next++ {
			if m := re.FindStringSubmatch(p.lines[next-p.dropped]); m != nil {
				p.mu.Unlock()
				return m, nil
			}
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-p.done:
			// one more pass happened above only if lines arrived before done
			p.mu.Lock()
			rest := len(p.lines) - (next - p.dropped)
			p.mu.Unlock()
			if rest > 0 {
				continue
			}
			return nil, fmt.Errorf("%w before printing %s (%s on %s): %s", ErrExited, re, strings.Join(p.Args, " "), p.Host.Name, p.Tail(20))
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s from %s on %s: %w; output:\n%s", re, strings.Join(p.Args, " "), p.Host.Name, ctx.Err(), p.Tail(20))
		case <-ch:
		}
	}
}

// Tail returns the last n lines of output.
func (p *Proc) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.lines
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// PID is the binary's process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill is kill -9; it returns once the process is reaped.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a frozen process dies too
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Terminate sends SIGTERM and waits for the exit or ctx (then kill -9).
func (p *Proc) Terminate(ctx context.Context) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Kill()
	}
}

// Freeze stops the process (SIGSTOP): it keeps its sockets open and stops
// answering. Thaw resumes it.
// It returns once every thread of the process is stopped (SIGSTOP is
// delivered asynchronously: a thread still running could answer a request
// sent right after the signal).
func (p *Proc) Freeze() error {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for !p.allThreadsStopped() {
		if time.Now().After(deadline) {
			return fmt.Errorf("testbed: pid %d not stopped 5s after SIGSTOP", p.PID())
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// allThreadsStopped reports whether every thread of the process is in
// state T (stopped).
func (p *Proc) allThreadsStopped() bool {
	dir := "/proc/" + strconv.Itoa(p.PID()) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			return false
		}
		// stat is "pid (comm) S ...": the state follows the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// Thaw resumes a frozen process (SIGCONT).
func (p *Proc) Thaw() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// RSS is the process's resident memory in bytes (VmRSS).
func (p *Proc) RSS() (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("testbed: no VmRSS for pid %d", p.PID())
}
