package store

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/bench/benchproc"
	"io"
	"math"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrRedisBenchmarkMissing is returned (as Result.RedisSkipped) when
// redis-benchmark is not installed.
var ErrRedisBenchmarkMissing = errors.New("redis-benchmark not installed (apt-get install redis-tools)")

// errCSV marks redis-benchmark output that is not the CSV it should be.
var errCSV = errors.New("redis-benchmark: malformed --csv output")

// redisBench runs Debian's redis-benchmark against one Redis.
type redisBench struct {
	bin, host, port string
	timeout         time.Duration // per invocation
	pid             int           // redis-server's process (0: not started by the bench)
}

// startRedis finds the Redis to compare with: mode "off" or "" -> none;
// "auto" -> redis-server started on a free loopback port (stop ends it);
// otherwise mode is HOST:PORT of a running Redis. Both need redis-benchmark.
func startRedis(ctx context.Context, mode string) (*redisBench, func(), error) {
	switch mode {
	case "off", "":
		return nil, nil, nil
	}
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return nil, nil, ErrRedisBenchmarkMissing
	}
	rb := &redisBench{bin: bin, timeout: 5 * time.Minute}
	if mode != "auto" {
		if rb.host, rb.port, err = net.SplitHostPort(mode); err != nil {
			return nil, nil, fmt.Errorf("--redis %q: want auto, off or HOST:PORT", mode)
		}
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := d.DialContext(dctx, "tcp", mode)
		if err != nil {
			return nil, nil, fmt.Errorf("redis at %s: %w", mode, err)
		}
		c.Close()
		return rb, nil, nil
	}
	r, err := benchproc.StartRedis(ctx)
	if err != nil {
		return nil, nil, err
	}
	rb.pid = r.PID
	rb.host, rb.port, err = net.SplitHostPort(r.Addr)
	if err != nil {
		r.Stop()
		return nil, nil, err
	}
	return rb, r.Stop, nil
}

// csvRow is one test's line of redis-benchmark --csv.
type csvRow struct {
	Test         string
	RPS          float64 // requests per second (+Inf when too fast to time)
	P50ms, P99ms float64
	CPU          time.Duration // redis-benchmark's CPU time (set by run, not parsed)
}

// parseCSV decodes redis-benchmark --csv output: a header naming at least
// "test", "rps", "p50_latency_ms" and "p99_latency_ms", then one line per
// test.
func parseCSV(r io.Reader) ([]csvRow, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCSV, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: empty", errCSV)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, h := range []string{"test", "rps", "p50_latency_ms", "p99_latency_ms"} {
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("%w: no %q column (redis-benchmark older than 7?)", errCSV, h)
		}
	}
	var out []csvRow
	for _, rec := range recs[1:] {
		if len(rec) != len(recs[0]) {
			return nil, fmt.Errorf("%w: %d fields, header has %d", errCSV, len(rec), len(recs[0]))
		}
		num := func(h string) (float64, error) {
			v, err := strconv.ParseFloat(rec[col[h]], 64)
			if err != nil || math.IsNaN(v) || v < 0 {
				return 0, fmt.Errorf("%w: %s %q", errCSV, h, rec[col[h]])
			}
			return v, nil
		}
		row := csvRow{Test: rec[col["test"]]}
		var errs [3]error
		row.RPS, errs[0] = num("rps")
		row.P50ms, errs[1] = num("p50_latency_ms")
		row.P99ms, errs[2] = num("p99_latency_ms")
		if err := errors.Join(errs[:]...); err != nil {
			return nil, err
		}
		if math.IsInf(row.P50ms, 0) || math.IsInf(row.P99ms, 0) {
			return nil, fmt.Errorf("%w: infinite latency", errCSV)
		}
		out = append(out, row)
	}
	return out, nil
}

// run runs one redis-benchmark invocation with args and returns the line
// of test (upper case, as redis-benchmark names it).
func (rb *redisBench) run(ctx context.Context, test string, args ...string) (csvRow, error) {
	ctx, cancel := context.WithTimeout(ctx, rb.timeout)
	defer cancel()
	args = append([]string{"-h", rb.host, "-p", rb.port, "--csv"}, args...)
	cmd := exec.CommandContext(ctx, rb.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return csvRow{}, fmt.Errorf("redis-benchmark %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	rows, err := parseCSV(&stdout)
	if err != nil {
		return csvRow{}, err
	}
	for _, r := range rows {
		if r.Test == test {
			r.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			return r, nil
		}
	}
	return csvRow{}, fmt.Errorf("%w: no %s line in %q (stderr %q)", errCSV, test, stdout.String(), stderr.String())
}

// runProcs runs procs redis-benchmark invocations with args at once and
// sums them up: requests per second added (each process's own rate over
// its own run: a process that ends early leaves the others more CPU, so the
// sum leans in Redis's favour), the median of their p50s, the highest p99,
// their CPU times added.
func (rb *redisBench) runProcs(ctx context.Context, procs int, test string, args ...string) (csvRow, error) {
	if procs <= 1 {
		return rb.run(ctx, test, args...)
	}
	rows := make([]csvRow, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() { rows[i], errs[i] = rb.run(ctx, test, args...) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return csvRow{}, err
	}
	sum := csvRow{Test: test}
	p50s := make([]float64, 0, procs)
	for _, r := range rows {
		sum.RPS += r.RPS
		sum.P99ms = max(sum.P99ms, r.P99ms)
		sum.CPU += r.CPU
		p50s = append(p50s, r.P50ms)
	}
	slices.Sort(p50s)
	sum.P50ms = p50s[len(p50s)/2]
	return sum, nil
}

// flushAll empties the Redis between rounds.
func (rb *redisBench) flushAll(ctx context.Context) error {
	_, err := rb.run(ctx, "FLUSHALL", "-n", "1", "-c", "1", "FLUSHALL")
	return err
}

// redisSet is one configuration's key set in one round: keys keys of size
// bytes (redis-benchmark -r keys), written by clients connections.
type redisSet struct {
	size, clients, keys int
	procs               bool // clients redis-benchmark processes of one connection each (SystemRedisProcs)
	sets                int  // SETs issued so far this round
}

// system is the rows' system.
func (s *redisSet) system() string {
	if s.procs {
		return SystemRedisProcs
	}
	return SystemRedis
}

// cover is the number of random SETs after which each of k keys is
// missing with probability e^-5 (under 1%): k(ln k + 5).
func cover(k int) int { return int(math.Ceil(float64(k) * (math.Log(float64(k)) + 5))) }

// phase measures op (put, batch-put, get, batch-get, exist) on set for about d:
// rate is the ops/s of this phase in an earlier round (0: none, a short
// calibration run sizes this one). Before a get phase, unmeasured pipelined
// SETs top the key set up to cover(keys), so that gets find their values.
// It returns the row and the measured ops/s.
func (rb *redisBench) phase(ctx context.Context, set *redisSet, op string, rate float64, d time.Duration) (Row, float64, error) {
	pipeline := 1
	if strings.HasPrefix(op, "batch") {
		pipeline = BatchKeys
	}
	test := "set"
	switch {
	case strings.HasSuffix(op, "get"):
		test = "get"
	case op == "exist":
		// Pipelined EXISTS of the SETs' keys (redis-benchmark's -r key names).
		test, pipeline = "exists", ExistKeys
	}
	bench := func(test string, n, pipeline int) (csvRow, error) {
		conns, procs := set.clients, 1
		if set.procs {
			conns, procs = 1, set.clients
		}
		common := []string{"-c", strconv.Itoa(conns), "-n", strconv.Itoa((n + procs - 1) / procs), "-r", strconv.Itoa(set.keys), "-P", strconv.Itoa(pipeline)}
		args, name := append([]string{"-t", test, "-d", strconv.Itoa(set.size)}, common...), strings.ToUpper(test)
		if test == "exists" {
			args, name = append(common, "EXISTS", "key:__rand_int__"), "EXISTS key:__rand_int__"
		}
		r, err := rb.runProcs(ctx, procs, name, args...)
		if err == nil && test == "set" {
			set.sets += n
		}
		return r, err
	}
	if need := cover(set.keys) - set.sets; test != "set" && need > 0 {
		if _, err := bench("set", need, BatchKeys); err != nil {
			return Row{}, 0, err
		}
	}
	least := set.clients * pipeline
	if !(rate > 0) || math.IsInf(rate, 0) {
		n0 := max((16<<20)/set.size, least)
		r, err := bench(test, n0, pipeline)
		if err != nil {
			return Row{}, 0, err
		}
		rate = r.RPS
		if math.IsInf(rate, 0) {
			rate = float64(n0) / 1e-3 // finished within redis-benchmark's 1 ms resolution
		}
	}
	n := min(max(int(rate*d.Seconds()), least), 1<<26)
	var srv0 time.Duration
	if rb.pid != 0 {
		srv0 = procCPU(rb.pid)
	}
	r, err := bench(test, n, pipeline)
	if err != nil {
		return Row{}, 0, err
	}
	var srv time.Duration
	if rb.pid != 0 {
		srv = procCPU(rb.pid) - srv0
	}
	rps := r.RPS
	if math.IsInf(rps, 0) || rps == 0 {
		rps = float64(n) / 1e-3
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	return Row{System: set.system(), Op: op, Size: set.size, Clients: set.clients, Ops: n,
		Elapsed: time.Duration(float64(n) / rps * float64(time.Second)), P50: ms(r.P50ms), P99: ms(r.P99ms),
		CPU: r.CPU, ServerCPU: srv}, rps, nil
}
