package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
	"github.com/spf13/cobra"
)

func newBenchStoreCmd() *cobra.Command {
	var (
		sizesFlag, clientsFlag, segSizeFlag, redisFlag, transport string
		nodes, rounds                                             int
		duration                                                  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Put/get throughput and latency of the store, next to Redis on loopback",
		Long: `Starts a master and storage nodes in this process (loopback, real transfer
engines), then for each value size and client count runs a put phase and a get
phase of --duration each: ops/s, GB/s, p50/p99 latency. The same workload runs
against Debian's redis-server (started on a free loopback port when installed,
or --redis HOST:PORT) as the peer anchor, and single-thread memcpy is measured
as the machine's limit. Last, it fills a fresh pool with mixed-size values until
the first eviction and reports the segment utilisation reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var sizes []int
			for _, s := range strings.Split(sizesFlag, ",") {
				n, err := parseSize(s)
				if err != nil || n == 0 {
					return &ExitError{Code: 2, Err: fmt.Errorf("--sizes: bad size %q", s)}
				}
				sizes = append(sizes, int(n))
			}
			var clients []int
			for _, s := range strings.Split(clientsFlag, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 1 || n > 64 {
					return &ExitError{Code: 2, Err: fmt.Errorf("--clients: bad count %q", s)}
				}
				clients = append(clients, n)
			}
			seg, err := parseSize(segSizeFlag)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			if nodes < 1 || duration <= 0 || rounds < 1 {
				return &ExitError{Code: 2, Err: errors.New("--nodes, --rounds and --duration must be positive")}
			}
			return runBenchStore(cmd.Context(), cmd.OutOrStdout(), benchStoreConfig{sizes: sizes, clients: clients, segSize: seg,
				nodes: nodes, duration: duration, rounds: rounds, redis: redisFlag, transport: transport})
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizesFlag, "sizes", "4KiB,64KiB,1MiB,16MiB", "value sizes")
	f.StringVar(&clientsFlag, "clients", "1,8", "concurrent client counts")
	f.StringVar(&segSizeFlag, "segment-size", "512MiB", "segment size of each storage node")
	f.IntVar(&nodes, "nodes", 2, "storage nodes")
	f.DurationVar(&duration, "duration", 500*time.Millisecond, "duration of each phase")
	f.IntVar(&rounds, "rounds", 3, "rounds per configuration, alternating the systems; the median is reported")
	f.StringVar(&redisFlag, "redis", "auto", `"auto" (start redis-server if installed), "off", or HOST:PORT of a running Redis`)
	f.StringVar(&transport, "transport", "auto", "transfer transport of clients and nodes: auto, tcp, shm")
	return cmd
}

type benchStoreConfig struct {
	sizes, clients []int
	segSize        uint64
	nodes          int
	duration       time.Duration
	rounds         int
	redis          string
	transport      string
}

type benchResult struct {
	system, op    string
	size, clients int
	ops           int
	elapsed       time.Duration
	p50, p99      time.Duration
	errs          int
	firstErr      error
}

func (r benchResult) opsPerSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }
func (r benchResult) gbps() float64 {
	return float64(r.ops) * float64(r.size) / r.elapsed.Seconds() / 1e9
}

// kvClient is one connection of the workload to a system under test.
type kvClient interface {
	put(ctx context.Context, key string, v []byte) error
	get(ctx context.Context, key string) ([]byte, error)
	// batchPut and batchGet move several keys in one call (Redis: pipelined).
	batchPut(ctx context.Context, keys []string, v []byte) error
	batchGet(ctx context.Context, keys []string, size int) error
}

// batchKeys is the number of keys per batch call in the batch phases.
const batchKeys = 32

func runBenchStore(ctx context.Context, out io.Writer, cfg benchStoreConfig) error {
	memcpy := measureMemcpy()
	fmt.Fprintf(out, "machine limit: single-thread memcpy %.2f GB/s\n", memcpy)

	srv, err := master.Start(master.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond})
	if err != nil {
		return err
	}
	defer srv.Close()
	var ns []*storenode.Node
	defer func() {
		for _, n := range ns {
			n.Close()
		}
	}()
	for range cfg.nodes {
		n, err := storenode.Start(ctx, storenode.Config{Master: srv.Addr(), SegmentSize: cfg.segSize,
			Engine: transfer.Config{Transport: cfg.transport}, UnmountGrace: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		ns = append(ns, n)
	}
	maxClients := slices.Max(cfg.clients)
	maxSize := slices.Max(cfg.sizes)
	var mc []kvClient
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for range maxClients {
		eng, err := transfer.Open(ctx, transfer.Config{Transport: cfg.transport})
		if err != nil {
			return err
		}
		cl, err := store.New(ctx, store.Config{Master: srv.Addr(), Mover: eng, LocalBufferSize: uint64(2*maxSize + 1<<20), UnmountGrace: 100 * time.Millisecond})
		if err != nil {
			eng.Close()
			return err
		}
		closers = append(closers, func() { cl.Close(); eng.Close() })
		buf := make([]byte, maxSize)
		if err := cl.RegisterBuffer(buf); err != nil {
			return err
		}
		mc = append(mc, &mooncakeKV{cl: cl, buf: buf})
	}

	var rc []kvClient
	redisAddr, stopRedis, err := startRedis(ctx, cfg.redis)
	if err != nil {
		fmt.Fprintf(out, "redis: %v (skipped)\n", err)
	}
	if stopRedis != nil {
		defer stopRedis()
	}
	if redisAddr != "" {
		for range maxClients {
			r, err := dialRESP(ctx, redisAddr)
			if err != nil {
				return fmt.Errorf("redis: %w", err)
			}
			closers = append(closers, func() { r.Close() })
			rc = append(rc, r)
		}
	}

	capacity := uint64(cfg.nodes) * cfg.segSize
	type phaseKey struct {
		system, op    string
		size, clients int
	}
	rounds := map[phaseKey][]benchResult{}
	var order []phaseKey
	for _, size := range cfg.sizes {
		for _, n := range cfg.clients {
			// Each client owns a key set; together they take a quarter of the pool.
			perClient := max(2, min(256, int(capacity/4/uint64(size))/n))
			// Rounds alternate the systems so that a burst of load on this
			// shared machine hits both; the median round is reported.
			for round := range cfg.rounds {
				for _, sys := range []struct {
					name string
					cl   []kvClient
				}{{"mooncake", mc}, {"redis", rc}} {
					if len(sys.cl) == 0 {
						continue
					}
					prefix := fmt.Sprintf("bench/%s/%d/%d/r%d", sys.name, size, n, round)
					// Every put phase runs before the get phases: a get leases its
					// key (10s), and a leased key cannot be overwritten.
					for _, op := range []string{"put", "batch-put", "get", "batch-get", "get-into"} {
						if strings.HasPrefix(op, "batch") && size > 1<<20 || op == "get-into" && sys.name != "mooncake" {
							continue
						}
						r := runPhase(ctx, sys.cl[:n], op, size, perClient, prefix, cfg.duration)
						r.system = sys.name
						k := phaseKey{sys.name, op, size, n}
						if len(rounds[k]) == 0 {
							order = append(order, k)
						}
						rounds[k] = append(rounds[k], r)
					}
					if sys.name == "mooncake" {
						_, _ = mc[0].(*mooncakeKV).cl.RemoveByRegex(ctx, "^"+prefix+"/", true)
					} else {
						_ = sys.cl[0].(*respClient).flushAll()
					}
				}
			}
		}
	}
	var results []benchResult
	for _, k := range order {
		rs := rounds[k]
		slices.SortFunc(rs, func(a, b benchResult) int { return cmp.Compare(a.gbps(), b.gbps()) })
		results = append(results, rs[len(rs)/2])
	}
	printBenchStore(out, results, memcpy)

	for _, wm := range []float64{0.90, 1.0} {
		u, err := measureUtilisation(ctx, wm, cfg.transport)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "segment utilisation before first eviction (mixed 4KiB-1MiB values, watermark %.2f): %.3f\n", wm, u)
	}
	return nil
}

func printBenchStore(out io.Writer, results []benchResult, memcpy float64) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "system\top\tsize\tclients\tops/s\tGB/s\tof memcpy\tp50\tp99\terrors\t")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%.0f\t%.3f\t%.3f\t%s\t%s\t%d\t\n", r.system, r.op, formatSize(uint64(r.size)), r.clients,
			r.opsPerSec(), r.gbps(), r.gbps()/memcpy, fmtDur(r.p50), fmtDur(r.p99), r.errs)
	}
	w.Flush()
	for _, r := range results {
		if r.firstErr != nil {
			fmt.Fprintf(out, "first error (median round) of %s %s %s x%d: %v\n", r.system, r.op, formatSize(uint64(r.size)), r.clients, r.firstErr)
		}
	}
	find := func(sys, op string, size, n int) *benchResult {
		for i := range results {
			r := &results[i]
			if r.system == sys && r.op == op && r.size == size && r.clients == n {
				return r
			}
		}
		return nil
	}
	fmt.Fprintf(out, "(ops/s counts keys; batch-* rows move %d keys per call (Redis: pipelined) and their p50/p99 are per call)\n", batchKeys)
	fmt.Fprintln(out, "mooncake vs redis (GB/s ratio; p50 ratio, lower is better):")
	for _, r := range results {
		if r.system != "mooncake" {
			continue
		}
		op := r.op
		if op == "get-into" {
			op = "get"
		}
		if p := find("redis", op, r.size, r.clients); p != nil && p.ops > 0 && r.ops > 0 {
			fmt.Fprintf(out, "  %s %s x%d: GB/s %.2fx, p50 %.2fx\n", r.op, formatSize(uint64(r.size)), r.clients,
				r.gbps()/p.gbps(), float64(r.p50)/float64(p.p50))
		}
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fus", float64(d)/1e3)
	default:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
}

// runPhase runs op on n clients for d and gathers throughput and latency.
func runPhase(ctx context.Context, cls []kvClient, op string, size, perClient int, prefix string, d time.Duration) benchResult {
	res := benchResult{op: op, size: size, clients: len(cls)}
	var mu sync.Mutex
	var lats []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for ci, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]byte, size)
			for i := range v {
				v[i] = byte(i*13 + ci)
			}
			r := rand.New(rand.NewPCG(uint64(ci), 7))
			var local []time.Duration
			keys := 0
			errs := 0
			var firstErr error
			for i := 0; time.Now().Before(deadline) || i < perClient && op == "put"; i++ {
				if ctx.Err() != nil {
					break
				}
				k := i % perClient
				if op != "put" {
					k = r.IntN(perClient)
				}
				key := fmt.Sprintf("%s/%d/%d", prefix, ci, k)
				t0 := time.Now()
				var err error
				keysDone := 1
				switch op {
				case "batch-put", "batch-get":
					nb := min(batchKeys, perClient)
					keys := make([]string, nb)
					first := r.IntN(perClient)
					for j := range keys {
						keys[j] = fmt.Sprintf("%s/%d/%d", prefix, ci, (first+j)%perClient)
					}
					if op == "batch-put" {
						err = cl.batchPut(ctx, keys, v)
					} else {
						err = cl.batchGet(ctx, keys, size)
					}
					keysDone = nb
				case "put":
					err = cl.put(ctx, key, v)
				case "get-into":
					var n int
					n, err = cl.(*mooncakeKV).getInto(ctx, key)
					if err == nil && n != size {
						err = fmt.Errorf("got %d bytes, want %d", n, size)
					}
				default:
					var got []byte
					got, err = cl.get(ctx, key)
					if err == nil && len(got) != size {
						err = fmt.Errorf("got %d bytes, want %d", len(got), size)
					}
				}
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				local = append(local, time.Since(t0))
				keys += keysDone
			}
			mu.Lock()
			lats = append(lats, local...)
			res.ops += keys
			res.errs += errs
			if res.firstErr == nil {
				res.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	if len(lats) > 0 {
		slices.Sort(lats)
		res.p50 = lats[len(lats)/2]
		res.p99 = lats[min(len(lats)-1, len(lats)*99/100)]
	}
	return res
}

// mooncakeKV is one store client; buf is registered memory for GetInto.
type mooncakeKV struct {
	cl  *store.Client
	buf []byte
}

// getInto reads into the client's registered buffer (zero copy, no allocation).
func (m *mooncakeKV) getInto(ctx context.Context, key string) (int, error) {
	return m.cl.GetInto(ctx, key, m.buf)
}

func (m *mooncakeKV) put(ctx context.Context, key string, v []byte) error {
	return m.cl.PutWith(ctx, key, v, store.PutOptions{Upsert: true})
}

func (m *mooncakeKV) get(ctx context.Context, key string) ([]byte, error) { return m.cl.Get(ctx, key) }

func (m *mooncakeKV) batchPut(ctx context.Context, keys []string, v []byte) error {
	vals := make([][]byte, len(keys))
	for i := range vals {
		vals[i] = v
	}
	for i, err := range m.cl.BatchPut(ctx, keys, vals, store.PutOptions{Upsert: true}) {
		if err != nil {
			return fmt.Errorf("%s: %w", keys[i], err)
		}
	}
	return nil
}

func (m *mooncakeKV) batchGet(ctx context.Context, keys []string, size int) error {
	vals, errs := m.cl.BatchGet(ctx, keys)
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("%s: %w", keys[i], err)
		}
		if len(vals[i]) != size {
			return fmt.Errorf("%s: got %d bytes, want %d", keys[i], len(vals[i]), size)
		}
	}
	return nil
}

// measureMemcpy is single-thread copy bandwidth of 64 MiB buffers, in GB/s.
func measureMemcpy() float64 {
	src := make([]byte, 64<<20)
	dst := make([]byte, 64<<20)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	best := 0.0
	for range 5 {
		t0 := time.Now()
		copy(dst, src)
		best = max(best, float64(len(src))/time.Since(t0).Seconds()/1e9)
	}
	return best
}

// measureUtilisation fills a fresh 2 x 64 MiB pool with mixed-size values
// until the first eviction runs and returns used/capacity at that moment.
func measureUtilisation(ctx context.Context, watermark float64, transport string) (float64, error) {
	srv, err := master.Start(master.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond,
		Core: master.Config{HighWatermark: watermark}})
	if err != nil {
		return 0, err
	}
	defer srv.Close()
	for range 2 {
		n, err := storenode.Start(ctx, storenode.Config{Master: srv.Addr(), SegmentSize: 64 << 20,
			Engine: transfer.Config{Transport: transport}, UnmountGrace: 10 * time.Millisecond})
		if err != nil {
			return 0, err
		}
		defer n.Close()
	}
	eng, err := transfer.Open(ctx, transfer.Config{Transport: transport})
	if err != nil {
		return 0, err
	}
	defer eng.Close()
	cl, err := store.New(ctx, store.Config{Master: srv.Addr(), Mover: eng, LocalBufferSize: 4 << 20})
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 1<<20)
	for i := 0; i < 100000 && srv.Core().Stats().EvictionRuns == 0; i++ {
		size := 4096 + r.IntN(1<<20-4096)
		if err := cl.Put(ctx, fmt.Sprintf("fill/%d", i), buf[:size]); err != nil && !errors.Is(err, store.ErrNoSpace) {
			return 0, err
		}
	}
	return srv.Core().Stats().UtilisationAtFirstEviction, nil
}

// startRedis returns the address of the Redis to compare with: mode
// "off" -> none; "auto" -> start redis-server on a free loopback port when
// installed; otherwise mode is the address of a running Redis.
func startRedis(ctx context.Context, mode string) (string, func(), error) {
	switch mode {
	case "off", "":
		return "", nil, nil
	case "auto":
	default:
		return mode, nil, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not installed (apt-get install redis-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "mooncake-bench-redis")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no", "--maxmemory", "0")
	// Redis must not outlive the bench, even when the bench is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-done
		os.RemoveAll(dir)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := dialRESP(ctx, addr)
		if err == nil {
			err = c.ping()
			c.Close()
			if err == nil {
				return addr, stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server did not answer PING on %s: %w", addr, err)
		}
		select {
		case <-done:
			stop()
			return "", nil, errors.New("redis-server exited at start")
		case <-time.After(20 * time.Millisecond): // poll interval while redis starts
		}
	}
}

// respClient is a minimal RESP2 client (SET, GET, PING) for the bench.
type respClient struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dialRESP(ctx context.Context, addr string) (*respClient, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &respClient{c: c, r: bufio.NewReaderSize(c, 1<<16), w: bufio.NewWriterSize(c, 1<<16)}, nil
}

func (r *respClient) Close() error { return r.c.Close() }

func (r *respClient) command(args ...[]byte) error {
	if err := r.queue(args...); err != nil {
		return err
	}
	return r.w.Flush()
}

// queue buffers one command without flushing.
func (r *respClient) queue(args ...[]byte) error {
	fmt.Fprintf(r.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(r.w, "$%d\r\n", len(a))
		r.w.Write(a)
		if _, err := r.w.WriteString("\r\n"); err != nil {
			return err
		}
	}
	return nil
}

// flushAll empties the bench's Redis between rounds.
func (r *respClient) flushAll() error {
	if err := r.command([]byte("FLUSHALL")); err != nil {
		return err
	}
	_, err := readRESP(r.r, 1<<20)
	return err
}

func (r *respClient) ping() error {
	if err := r.command([]byte("PING")); err != nil {
		return err
	}
	v, err := readRESP(r.r, 1<<20)
	if err != nil {
		return err
	}
	if s, ok := v.(string); !ok || s != "PONG" {
		return fmt.Errorf("redis: unexpected PING reply %v", v)
	}
	return nil
}

func (r *respClient) put(_ context.Context, key string, v []byte) error {
	if err := r.command([]byte("SET"), []byte(key), v); err != nil {
		return err
	}
	rep, err := readRESP(r.r, 1<<20)
	if err != nil {
		return err
	}
	if s, ok := rep.(string); !ok || s != "OK" {
		return fmt.Errorf("redis: SET replied %v", rep)
	}
	return nil
}

func (r *respClient) get(_ context.Context, key string) ([]byte, error) {
	if err := r.command([]byte("GET"), []byte(key)); err != nil {
		return nil, err
	}
	rep, err := readRESP(r.r, 512<<20)
	if err != nil {
		return nil, err
	}
	switch v := rep.(type) {
	case []byte:
		return v, nil
	case nil:
		return nil, store.ErrNotFound
	}
	return nil, fmt.Errorf("redis: GET replied %v", rep)
}

// batchPut pipelines one SET per key.
func (r *respClient) batchPut(_ context.Context, keys []string, v []byte) error {
	for _, k := range keys {
		if err := r.queue([]byte("SET"), []byte(k), v); err != nil {
			return err
		}
	}
	if err := r.w.Flush(); err != nil {
		return err
	}
	for range keys {
		rep, err := readRESP(r.r, 1<<20)
		if err != nil {
			return err
		}
		if s, ok := rep.(string); !ok || s != "OK" {
			return fmt.Errorf("redis: SET replied %v", rep)
		}
	}
	return nil
}

// batchGet pipelines one GET per key.
func (r *respClient) batchGet(_ context.Context, keys []string, size int) error {
	for _, k := range keys {
		if err := r.queue([]byte("GET"), []byte(k)); err != nil {
			return err
		}
	}
	if err := r.w.Flush(); err != nil {
		return err
	}
	for _, k := range keys {
		rep, err := readRESP(r.r, 512<<20)
		if err != nil {
			return err
		}
		if b, ok := rep.([]byte); !ok || len(b) != size {
			return fmt.Errorf("redis: GET %s replied %T of wrong size", k, rep)
		}
	}
	return nil
}

// errRESP marks a malformed reply.
var errRESP = errors.New("resp: malformed reply")

// readRESP decodes one RESP2 reply: simple string -> string, error -> error
// value, integer -> int64, bulk string -> []byte (nil for $-1), array ->
// []any. Bulk strings longer than maxBulk and nesting deeper than 8 are
// refused.
func readRESP(r *bufio.Reader, maxBulk int) (any, error) { return readRESPDepth(r, maxBulk, 0) }

func readRESPDepth(r *bufio.Reader, maxBulk, depth int) (any, error) {
	if depth > 8 {
		return nil, fmt.Errorf("%w: nesting too deep", errRESP)
	}
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line too long", errRESP)
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: bad line %q", errRESP, line)
	}
	body := string(line[1 : len(line)-2])
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return errors.New("redis: " + body), nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: bad integer %q", errRESP, body)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxBulk {
			return nil, fmt.Errorf("%w: bad bulk length %q", errRESP, body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, fmt.Errorf("%w: bulk not terminated", errRESP)
		}
		return buf[:n], nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 1<<20 {
			return nil, fmt.Errorf("%w: bad array length %q", errRESP, body)
		}
		if n == -1 {
			return nil, nil
		}
		out := make([]any, 0, min(n, 1024))
		for range n {
			v, err := readRESPDepth(r, maxBulk, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown type %q", errRESP, line[0])
}
