package store

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kvcache-go/mooncake/internal/bench/benchproc"
)

// SystemClientProcs names the rows of the cluster whose master, storage
// nodes and clients are each a process of their own (Config.ClientProcs):
// one client per process, as one engine worker per process is deployed.
const SystemClientProcs = "mooncake-cproc"

// workerReady is the first line a client process prints, once its client
// is open and its buffer registered.
const workerReady = "store client ready"

// WorkerConfig is one client process of Config.ClientProcs (`mooncake bench
// store --client-worker`).
type WorkerConfig struct {
	Master    string // the master's address
	Transport string // its transfer engine's transport
	MaxSize   int    // the largest value it moves (its registered buffer)
}

// workerCmd is one phase a client process runs, sent as a JSON line.
type workerCmd struct {
	Op        string
	Size      int
	PerClient int
	CI        int // its client number: its keys are Prefix/CI/k
	Prefix    string
	Deadline  int64 // unix nanoseconds: when the phase ends
}

// workerReply is a client process's answer to a workerCmd, a JSON line.
type workerReply struct {
	clientRun
	Start, End int64 // unix nanoseconds
	CPU        int64 // the process's CPU time during the phase, ns
}

// RunWorker is a client process: it opens a transfer engine and a store
// client of cfg.Master, prints workerReady, then runs each phase read from
// in (a JSON workerCmd per line) and answers it on out (a workerReply per
// line) until in ends.
func RunWorker(ctx context.Context, cfg WorkerConfig, in io.Reader, out io.Writer) error {
	mc, err := openClients(ctx, cfg.Master, 1, max(cfg.MaxSize, 4096), Config{Transport: cfg.Transport})
	if err != nil {
		return err
	}
	defer closeAll(mc)
	if _, err := fmt.Fprintln(out, workerReady); err != nil {
		return err
	}
	dec, enc := json.NewDecoder(in), json.NewEncoder(out)
	for {
		var c workerCmd
		if err := dec.Decode(&c); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("bench store worker: %w", err)
		}
		start, cpu0 := time.Now(), cpuTime()
		run := runClient(ctx, c.CI, mc[0], c.Op, c.Size, c.PerClient, c.Prefix, time.Unix(0, c.Deadline))
		rep := workerReply{clientRun: run, Start: start.UnixNano(), End: time.Now().UnixNano(), CPU: int64(cpuTime() - cpu0)}
		if err := enc.Encode(&rep); err != nil {
			return err
		}
	}
}

// clientProc is one client process of the benchmark.
type clientProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *json.Decoder
	stderr *tailBuf
	done   chan struct{} // closed when Wait returned
}

// phaseGrace is how long past a phase's end a client process may take to
// answer before the phase fails.
const phaseGrace = 30 * time.Second

// startClientProcs starts n client processes of bin (`bin bench store
// --client-worker`) on the master at addr, each killed with the benchmark
// (Pdeathsig), and returns once every one printed workerReady.
func startClientProcs(ctx context.Context, bin, addr string, n, maxSize int, transport string) ([]*clientProc, error) {
	var ps []*clientProc
	for range n {
		p, err := startClientProc(ctx, bin, "bench", "store", "--client-worker", "--master", addr,
			"--transport", transport, "--max-size", strconv.Itoa(maxSize))
		if err != nil {
			stopClientProcs(ps)
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func startClientProc(ctx context.Context, bin string, args ...string) (*clientProc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = benchproc.Env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &clientProc{cmd: cmd, stderr: &tailBuf{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s bench store --client-worker: %w", bin, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	r := bufio.NewReader(out)
	first := make(chan string, 1)
	go func() {
		line, _ := r.ReadString('\n')
		first <- line
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case line := <-first:
		if line != workerReady+"\n" {
			p.stop()
			return nil, fmt.Errorf("client process: first line %q, want %q (stderr: %s)", line, workerReady, p.stderr)
		}
	case <-t.C:
		p.stop()
		return nil, fmt.Errorf("client process: not ready within %v", startTimeout)
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
	p.out = json.NewDecoder(r)
	return p, nil
}

// stop closes the process's stdin (it then exits) and kills it after 5 s.
func (p *clientProc) stop() {
	_ = p.in.Close()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func stopClientProcs(ps []*clientProc) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(p.stop)
	}
	wg.Wait()
}

// runProcPhase runs op on the client processes for d, all at once, and
// gathers their figures: Elapsed from the first start to the last end,
// CPU the sum of theirs.
func runProcPhase(ctx context.Context, system string, ps []*clientProc, op string, size, perClient int, prefix string, d time.Duration) (Row, error) {
	res := Row{System: system, Op: op, Size: size, Clients: len(ps)}
	deadline := time.Now().Add(d)
	replies := make([]workerReply, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		c := workerCmd{Op: op, Size: size, PerClient: perClient, CI: i, Prefix: prefix, Deadline: deadline.UnixNano()}
		wg.Go(func() { replies[i], errs[i] = p.run(ctx, c, d+phaseGrace) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	runs := make([]clientRun, len(ps))
	var start, end int64
	for i, rep := range replies {
		runs[i] = rep.clientRun
		if start == 0 || rep.Start < start {
			start = rep.Start
		}
		end = max(end, rep.End)
		res.CPU += time.Duration(rep.CPU)
	}
	res.Elapsed = time.Duration(end - start)
	res.gather(runs)
	return res, nil
}

// run sends c and waits up to limit for the answer; a process that does
// not answer in time is killed.
func (p *clientProc) run(ctx context.Context, c workerCmd, limit time.Duration) (workerReply, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return workerReply{}, err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return workerReply{}, fmt.Errorf("client process %d: %w (stderr: %s)", c.CI, err, p.stderr)
	}
	type ans struct {
		r   workerReply
		err error
	}
	got := make(chan ans, 1)
	go func() {
		var a ans
		a.err = p.out.Decode(&a.r)
		got <- a
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case a := <-got:
		if a.err != nil {
			return workerReply{}, fmt.Errorf("client process %d: %w (stderr: %s)", c.CI, a.err, p.stderr)
		}
		return a.r, nil
	case <-t.C:
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Kill()
	<-got // the pipe ends with the process
	return workerReply{}, fmt.Errorf("client process %d: no answer within %v of %s", c.CI, limit, c.Op)
}

// tailBuf keeps the last 2 KiB written to it (a child's stderr).
type tailBuf struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuf) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = append(t.b[:0], t.b[len(t.b)-2048:]...)
	}
	return len(p), nil
}

func (t *tailBuf) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
