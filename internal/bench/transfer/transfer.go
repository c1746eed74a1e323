package transfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/grant"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcache-go/mooncake/internal/bench/limits"
	"github.com/kvcache-go/mooncake/transfer"
)

// Config is one benchmark run.
type Config struct {
	Transport  string        // tcp | shm | inproc
	Op         string        // read | write
	BlockSize  int           // bytes per request
	BatchSize  int           // requests per batch
	Threads    int           // concurrent submitters
	Duration   time.Duration // measured time
	BufferSize int           // bytes registered on each side (0: threads*batch*block, at least 1 MiB)
	Checksum   bool
	Secret     string
	Lanes      int
	SliceSize  int       // TCP slice size (0: engine default)
	Progress   io.Writer // progress lines (nil: none)
	// Device is where the initiator's buffer lives: "cpu" (or "") or
	// "cuda" (device 0 of the CUDA driver). TargetDevice is the target's
	// ("": the same as Device). CUDALib is the driver library ("":
	// libcuda.so.1). See device.go.
	Device       string
	TargetDevice string
	CUDALib      string
	// ScatterGather sends each batch as ONE scatter-gather request
	// (transfer.Request.Extents) of BatchSize extents of BlockSize bytes,
	// the remote extents in reverse order so that none merge: the shape
	// of a KV transfer between different TP sizes.
	ScatterGather bool
	// GrantKey, when set (hex, at least 16 bytes), turns data-path grants
	// on: the target checks them, the initiator sends one grant per thread
	// for the extent that thread moves.
	GrantKey string
}

func (c *Config) grantKeys() (*grant.Keyring, error) {
	if c.GrantKey == "" {
		return nil, nil
	}
	return grant.ParseKeys([]byte("1:" + c.GrantKey))
}

// Validate checks the run.
func (c *Config) Validate() error {
	switch c.Transport {
	case "tcp", "shm", "inproc":
	default:
		return fmt.Errorf("bench transfer: transport %q: want tcp, shm or inproc", c.Transport)
	}
	switch c.Op {
	case "read", "write":
	default:
		return fmt.Errorf("bench transfer: op %q: want read or write", c.Op)
	}
	if c.BlockSize <= 0 || c.BatchSize <= 0 || c.Threads <= 0 || c.Duration <= 0 {
		return errors.New("bench transfer: block size, batch size, threads and duration must be positive")
	}
	if c.bufferSize() < c.BlockSize*c.BatchSize {
		return errors.New("bench transfer: buffer smaller than one batch")
	}
	return c.validateDevice()
}

func (c *Config) bufferSize() int {
	if c.BufferSize > 0 {
		return c.BufferSize
	}
	return max(c.Threads*c.BatchSize*c.BlockSize, 1<<20)
}

// Result is one run's figures (the --json object).
type Result struct {
	Transport       string  `json:"transport"`
	Op              string  `json:"op"`
	BlockSize       int     `json:"block_size"`
	BatchSize       int     `json:"batch_size"`
	Threads         int     `json:"threads"`
	Seconds         float64 `json:"seconds"`
	Bytes           int64   `json:"bytes"`
	GBPerS          float64 `json:"gb_per_s"`
	OpsPerS         float64 `json:"ops_per_s"`
	P50us           float64 `json:"p50_us"`
	P99us           float64 `json:"p99_us"`
	BaselineGBPerS  float64 `json:"baseline_gb_per_s"`
	Ratio           float64 `json:"ratio"`
	Baseline        string  `json:"baseline"`
	ServedTransport string  `json:"served_transport"`
	Device          string  `json:"device,omitempty"`
	TargetDevice    string  `json:"target_device,omitempty"`
	ScatterGather   bool    `json:"scatter_gather,omitempty"` // each batch one scatter-gather request
}

func (r Result) String() string {
	sg := ""
	if r.ScatterGather {
		sg = " scatter-gather"
	}
	return fmt.Sprintf("%s %s%s block=%d batch=%d threads=%d: %.3f GB/s, %.0f ops/s, batch latency p50 %.0f us p99 %.0f us; baseline (%s) %.3f GB/s; ratio %.2f",
		r.Transport, r.Op, sg, r.BlockSize, r.BatchSize, r.Threads, r.GBPerS, r.OpsPerS, r.P50us, r.P99us, r.Baseline, r.BaselineGBPerS, r.Ratio)
}

func engineConfig(c Config) transfer.Config {
	tr := c.Transport
	if tr == "shm" {
		tr = transfer.TransportShm
	}
	return transfer.Config{Transport: tr, Checksum: c.Checksum, Secret: c.Secret, Lanes: c.Lanes, SliceSize: c.SliceSize, InprocHub: inprocHub,
		Device: c.driverOrNil()}
}

// inprocHub lets the benchmark's in-process target and initiator reach each other.
var inprocHub = transfer.NewHub()

// Target is a running benchmark target.
type Target struct {
	Engine *transfer.Engine
	Addr   uintptr // its registered buffer (host or device memory)
	Len    int
	Sink   *limits.Sink // raw TCP sink for the baseline
	free   func()
}

// StartTarget opens the target engine, registers its buffer (managed memory
// for shm) and starts the raw-TCP baseline sink.
func StartTarget(ctx context.Context, c Config) (*Target, error) {
	ecfg := engineConfig(c)
	keys, err := c.grantKeys()
	if err != nil {
		return nil, err
	}
	if keys != nil {
		ecfg.Grants = grant.NewVerifier(keys, nil)
	}
	e, err := transfer.Open(ctx, ecfg)
	if err != nil {
		return nil, err
	}
	t := &Target{Engine: e, Len: c.bufferSize()}
	if t.Addr, t.free, err = c.allocate(e, c.targetDevice(), t.Len); err != nil {
		_ = e.Close()
		return nil, err
	}
	if t.Sink, err = limits.ListenSink(c.BlockSize); err != nil {
		_ = e.Close()
		t.free()
		return nil, err
	}
	return t, nil
}

// Line is what a target process prints for its initiator.
func (t *Target) Line() string {
	return fmt.Sprintf("TARGET %s %d %d %s", t.Engine.Name(), t.Addr, t.Len, t.Sink.Addr())
}

// Close stops the target.
func (t *Target) Close() error {
	_ = t.Sink.Close()
	err := t.Engine.Close()
	t.free()
	return err
}

// allocate registers n bytes with e on device ("cpu" or "cuda"): managed
// memory for shm, a Go slice for other host runs, device memory for cuda.
func (c *Config) allocate(e *transfer.Engine, device string, n int) (uintptr, func(), error) {
	if device == "cuda" {
		return c.allocateDevice(e, n)
	}
	if c.Transport == "shm" {
		b, err := e.AllocateManaged(n)
		return transfer.AddrOf(b), func() {}, err
	}
	b := make([]byte, n)
	return transfer.AddrOf(b), func() { runtime.KeepAlive(b) }, e.RegisterBytes(b, "cpu:0")
}

// ServeTarget is the target mode of a child process: it starts a target,
// prints its Line to out and serves until in reaches EOF (the initiator
// that spawned it closed the pipe) or ctx ends.
func ServeTarget(ctx context.Context, c Config, out io.Writer, in io.Reader) error {
	t, err := StartTarget(ctx, c)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(out, t.Line()); err != nil {
		_ = t.Close()
		return err
	}
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, in); close(eof) }()
	select {
	case <-ctx.Done():
	case <-eof:
	}
	return t.Close()
}

// TargetInfo is where the initiator finds the target.
type TargetInfo struct {
	Segment string
	Addr    uint64
	Len     int
	Sink    string // raw TCP sink ("" = run one locally)
}

// ParseLine parses Target.Line output.
func ParseLine(line string) (TargetInfo, error) {
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "TARGET" {
		return TargetInfo{}, fmt.Errorf("bench transfer: target said %q", line)
	}
	addr, err1 := strconv.ParseUint(f[2], 10, 64)
	n, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil {
		return TargetInfo{}, fmt.Errorf("bench transfer: target said %q", line)
	}
	return TargetInfo{Segment: f[1], Addr: addr, Len: n, Sink: f[4]}, nil
}

// SpawnTarget re-executes exe with args (which must run a target that prints
// Line on stdout) and returns where it is. stop ends it.
func SpawnTarget(ctx context.Context, exe string, args []string) (TargetInfo, func(), error) {
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return TargetInfo{}, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return TargetInfo{}, nil, err
	}
	if err := cmd.Start(); err != nil {
		return TargetInfo{}, nil, fmt.Errorf("bench transfer: start target: %w", err)
	}
	stop := func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		for {
			l, err := r.ReadString('\n')
			if strings.HasPrefix(l, "TARGET ") {
				lines <- l
				_, _ = io.Copy(io.Discard, r)
				return
			}
			if err != nil {
				lines <- ""
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case l := <-lines:
		info, err := ParseLine(l)
		if err != nil {
			stop()
			return TargetInfo{}, nil, err
		}
		return info, stop, nil
	case <-ctx.Done():
		stop()
		return TargetInfo{}, nil, fmt.Errorf("bench transfer: target did not report its address: %w", ctx.Err())
	}
}

// RunInitiator runs the benchmark against target and measures the baseline.
func RunInitiator(ctx context.Context, c Config, target TargetInfo) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	e, err := transfer.Open(ctx, engineConfig(c))
	if err != nil {
		return Result{}, err
	}
	defer e.Close()
	per := c.BatchSize * c.BlockSize
	localBase, free, err := c.allocate(e, c.Device, max(per*c.Threads, 1<<20))
	if err != nil {
		return Result{}, err
	}
	defer free()
	seg, err := e.OpenSegment(ctx, target.Segment)
	if err != nil {
		return Result{}, err
	}
	remoteSlots := max(target.Len/per, 1)
	if target.Len < per {
		return Result{}, fmt.Errorf("bench transfer: target buffer %d bytes < one batch %d", target.Len, per)
	}
	op := transfer.OpWrite
	if c.Op == "read" {
		op = transfer.OpRead
	}
	keys, err := c.grantKeys()
	if err != nil {
		return Result{}, err
	}
	// The machine's limit is measured before and after the run (half each)
	// and averaged, so that load changes during the run cancel out.
	bd := min(max(c.Duration/2, 500*time.Millisecond), 2*time.Second) / 2
	limit := func() (float64, error) {
		if c.device() {
			return c.pinnedCopyLimit(bd)
		}
		if c.Transport == "tcp" {
			return limits.RawTCP(ctx, target.Sink, c.BlockSize, bd)
		}
		return limits.Memcpy(per*c.Threads, c.BlockSize, bd), nil // same working set as the run
	}
	before, err := limit()
	if err != nil {
		return Result{}, err
	}
	var (
		total   atomic.Int64
		served  atomic.Value
		wg      sync.WaitGroup
		lats    = make([][]time.Duration, c.Threads)
		errs    = make([]error, c.Threads)
		runCtx  context.Context
		cancel  context.CancelFunc
		started = time.Now()
	)
	runCtx, cancel = context.WithTimeout(ctx, c.Duration)
	defer cancel()
	for th := range c.Threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]transfer.Request, c.BatchSize)
			rbase := target.Addr + uint64((th%remoteSlots)*per)
			var g string
			if keys != nil {
				b, err := keys.Encode(grant.Grant{Segment: target.Segment, Addr: rbase, Length: uint64(per), Mode: grant.Read | grant.Write,
					Expires: time.Now().Add(c.Duration + 5*time.Minute)})
				if err != nil {
					errs[th] = err
					return
				}
				g = string(b)
			}
			for i := range reqs {
				reqs[i] = transfer.Request{Op: op, Local: localBase + uintptr(th*per+i*c.BlockSize), Segment: seg,
					Remote: rbase + uint64(i*c.BlockSize), Length: c.BlockSize, Grant: g}
			}
			if c.ScatterGather {
				ext := make([]transfer.Extent, len(reqs))
				for i, r := range reqs {
					ext[i] = transfer.Extent{Local: r.Local, Remote: reqs[len(reqs)-1-i].Remote, Length: r.Length}
				}
				reqs = []transfer.Request{{Op: op, Segment: seg, Extents: ext, Grant: g}}
			}
			for runCtx.Err() == nil {
				t0 := time.Now()
				b, err := e.Submit(ctx, reqs)
				if err == nil {
					err = b.Wait(ctx)
					if served.Load() == nil {
						served.Store(b.Transport(0))
					}
					b.Free()
				}
				if err != nil {
					errs[th] = err
					cancel()
					return
				}
				lats[th] = append(lats[th], time.Since(t0))
				total.Add(int64(per))
			}
		}()
	}
	if c.Progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(time.Second)
			defer tk.Stop()
			last, lastT := int64(0), started
			for {
				select {
				case <-runCtx.Done():
					return
				case now := <-tk.C:
					n := total.Load()
					fmt.Fprintf(c.Progress, "  %5.1fs  %.3f GB/s\n", now.Sub(started).Seconds(), float64(n-last)/now.Sub(lastT).Seconds()/1e9)
					last, lastT = n, now
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(started).Seconds()
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	r := Result{Transport: c.Transport, Op: c.Op, BlockSize: c.BlockSize, BatchSize: c.BatchSize, Threads: c.Threads, ScatterGather: c.ScatterGather,
		Seconds: elapsed, Bytes: total.Load()}
	r.GBPerS = float64(r.Bytes) / elapsed / 1e9
	r.OpsPerS = float64(r.Bytes/int64(c.BlockSize)) / elapsed
	r.P50us = pct(all, 0.50)
	r.P99us = pct(all, 0.99)
	if s, ok := served.Load().(string); ok {
		r.ServedTransport = s
	}
	after, err := limit()
	if err != nil {
		return r, err
	}
	r.BaselineGBPerS = (before + after) / 2
	r.Baseline = "single-thread memcpy"
	if c.Transport == "tcp" {
		r.Baseline = "raw Go loopback TCP, 1 connection"
	}
	if c.device() {
		r.Baseline = "pinned cuMemcpy, the slower direction"
		r.Device, r.TargetDevice = c.deviceName(), c.targetDevice()
	}
	if r.BaselineGBPerS > 0 {
		r.Ratio = r.GBPerS / r.BaselineGBPerS
	}
	return r, nil
}

func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	i := min(int(float64(len(d))*p), len(d)-1)
	return float64(d[i].Nanoseconds()) / 1e3
}

// ParseSize accepts 4KiB, 1MiB, 2GiB, 4K, 1M, 65536.
func ParseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := 1
	for _, u := range []struct {
		suf string
		m   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suf) {
			t, mult = strings.TrimSuffix(t, u.suf), u.m
			break
		}
	}
	n, err := strconv.Atoi(strings.TrimSpace(t))
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("bad size %q: want e.g. 4KiB, 1MiB, 65536", s)
	}
	return n * mult, nil
}

// Discover finds a separately started target's buffer through the handshake
// (its first registered buffer, like Mooncake's get_first_buffer_address).
// The baseline then runs against a local sink.
func Discover(ctx context.Context, c Config, segment string) (TargetInfo, error) {
	e, err := transfer.Open(ctx, engineConfig(c))
	if err != nil {
		return TargetInfo{}, err
	}
	defer e.Close()
	d, err := e.Segment(ctx, segment)
	if err != nil {
		return TargetInfo{}, err
	}
	if len(d.Buffers) == 0 {
		return TargetInfo{}, fmt.Errorf("bench transfer: target %s has no registered buffer", segment)
	}
	return TargetInfo{Segment: segment, Addr: d.Buffers[0].Addr, Len: int(d.Buffers[0].Length)}, nil
}
