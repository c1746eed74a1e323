package master

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/bench/benchproc"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startTimeout bounds how long a server or worker process may take to
// print its first line.
const startTimeout = 30 * time.Second

// proc is one child process of the benchmark: a master, a storage node or
// a worker. Every one gets SIGKILL when the bench process dies
// (Pdeathsig), so none outlives it even when the bench is killed.
type proc struct {
	cmd     *exec.Cmd
	errTail *tail // the end of its stderr, for failure messages
	started time.Time
	stdin   io.WriteCloser
	lines   chan string   // stdout lines after the first (buffered; dropped when full)
	done    chan struct{} // closed when Wait returned
}

// startProc runs bin with args and returns once it printed a first line
// starting with want (the line is returned). stdin: give the process a
// pipe (workers wait on it).
func startProc(ctx context.Context, bin, want string, stdin bool, args ...string) (*proc, string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = benchproc.Env()
	errTail := &tail{}
	cmd.Stderr = errTail
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	p := &proc{cmd: cmd, errTail: errTail, lines: make(chan string, 16), done: make(chan struct{})}
	if stdin {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, "", err
		}
	}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s %s: %w", bin, args[0], err)
	}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		line := ""
		if sc.Scan() {
			line = sc.Text()
		}
		first <- line
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, out) // keep the pipe drained until the process ends
		_ = cmd.Wait()
		close(p.lines)
		close(p.done)
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case line := <-first:
		if !strings.HasPrefix(line, want) {
			p.kill()
			return nil, "", fmt.Errorf("%s %s: first line %q, want %q...", bin, args[0], line, want)
		}
		return p, line, nil
	case <-t.C:
		p.kill()
		return nil, "", fmt.Errorf("%s %s: no first line within %v", bin, args[0], startTimeout)
	case <-ctx.Done():
		p.kill()
		return nil, "", ctx.Err()
	}
}

// tail keeps the last tailLen bytes written to it, and the last complete
// line holding one of marks (by mark).
type tail struct {
	mu     sync.Mutex
	b      []byte
	marked map[string]string
}

// Marks of log lines the bench reads: a storage node's report of a
// remount that succeeded (store.Client), the master's of a restore
// session that ended with segments restored (master.RestoreEnd).
const (
	remountMark = "remounted after NEED_REMOUNT"
	restoreMark = "restore session ended"
)

const tailLen = 2048

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	start := max(0, bytes.LastIndexByte(t.b, '\n')+1) // the line p continues
	t.b = append(t.b, p...)
	for rest := t.b[start:]; ; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		for _, m := range []string{remountMark, restoreMark} {
			// A session of a client without a segment (a loading client
			// remounting too) restores nothing: the node's is the one read.
			if bytes.Contains(rest[:i], []byte(m)) && !(m == restoreMark && bytes.Contains(rest[:i], []byte(" segments=0 "))) {
				if t.marked == nil {
					t.marked = map[string]string{}
				}
				t.marked[m] = string(rest[:i])
			}
		}
		rest = rest[i+1:]
	}
	if len(t.b) > tailLen {
		t.b = append(t.b[:0], t.b[len(t.b)-tailLen:]...)
	}
	return len(p), nil
}

// markedLine is the last line with mark written ("": none), and forgets it.
func (t *tail) markedLine(mark string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.marked[mark]
	delete(t.marked, mark)
	return l
}

// lastLine returns the last complete non-empty line written.
func (t *tail) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.b)), "\n")
	return lines[len(lines)-1]
}

// nextLine returns the process's next stdout line, waiting until deadline.
func (p *proc) nextLine(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l, ok := <-p.lines:
		if !ok {
			return "", errors.New("process exited")
		}
		return l, nil
	case <-t.C:
		return "", fmt.Errorf("no line within %v", timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM (and SIGCONT, in case it is stopped) and waits for
// the process, killing it after 10 s.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// wait waits up to timeout for the process to exit by itself (a worker
// that closed its clients, so the master sees them go), then stops it.
func (p *proc) wait(timeout time.Duration) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.stop()
	}
}

// kill sends SIGKILL and waits for the process.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// vmRSS returns VmRSS of process pid in bytes (/proc/PID/status).
func vmRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("VmRSS line %q", line)
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// admin reads the master's admin HTTP API.
type admin struct {
	base string // http://HOST:PORT
	hc   *http.Client
}

func newAdmin(addr string) *admin {
	return &admin{base: "http://" + addr, hc: &http.Client{Timeout: 30 * time.Second}}
}

// get fetches path and returns its body; an answer other than 200 is an
// error.
func (a *admin) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return body, nil
}

// summary is the part of /api/summary the bench reads.
type summary struct {
	Objects     int     `json:"objects"`
	Segments    int     `json:"segments"`
	Clients     int     `json:"clients"`
	Utilisation float64 `json:"utilisation_at_first_eviction"`
	Memory      struct {
		Capacity uint64 `json:"capacity"`
		Used     uint64 `json:"used"`
	} `json:"memory"`
	Counters struct {
		ClientsDropped uint64 `json:"clients_dropped"`
		Evictions      uint64 `json:"evictions"`
		EvictionRuns   uint64 `json:"eviction_runs"`
		PutsTimedOut   uint64 `json:"puts_timed_out"`
	} `json:"counters"`
}

func (a *admin) summary(ctx context.Context) (summary, error) {
	var s summary
	b, err := a.get(ctx, "/api/summary")
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// heapInuse returns go_memstats_heap_inuse_bytes from /metrics, ok false
// when the master does not expose it.
func (a *admin) heapInuse(ctx context.Context) (uint64, bool, error) {
	b, err := a.get(ctx, "/metrics")
	if err != nil {
		return 0, false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, false, fmt.Errorf("go_memstats_heap_inuse_bytes %q: %w", v, err)
			}
			return uint64(f), true, nil
		}
	}
	return 0, false, nil
}
