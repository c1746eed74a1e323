package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/grant"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvcache-go/mooncake/internal/bench/limits"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// BatchKeys is the number of keys per call in the batch-put and batch-get
// phases (Redis: the pipeline depth).
const BatchKeys = 32

// ExistKeys is the number of keys per call in the exist phase: one
// BatchExist (the store connector's prefix lookup is one such call);
// Redis: pipelined EXISTS, ExistKeys deep.
const ExistKeys = 1000

// Config is one run of the benchmark.
type Config struct {
	Sizes       []int         // value sizes in bytes
	Clients     []int         // concurrent client counts (1..64)
	SegmentSize uint64        // segment size of each storage node
	Nodes       int           // storage nodes
	Duration    time.Duration // duration of each phase
	Rounds      int           // rounds per configuration, alternating the systems; the median is reported
	// Redis is "auto" (start redis-server on a free loopback port when
	// installed), "off" or "" (none), or HOST:PORT of a running Redis.
	Redis     string
	Transport string // transfer transport of clients and nodes: auto, tcp, shm
	// Servers places the master and the storage nodes: ServersInProcess
	// ("" too: in this process, rows of system "mooncake"),
	// ServersProcess (each its own process of Binary, as redis-server is
	// its own; rows of system "mooncake-proc"), or ServersBoth, alternated
	// round by round with Redis. The clients always run in this process.
	Servers string
	Binary  string // the mooncake binary, for ServersProcess and ServersBoth
	// ClientProcs runs each client of the separate-process cluster
	// (ServersProcess, ServersBoth) as a process of its own (`Binary bench
	// store --client-worker`, RunWorker): one client per process, as one
	// engine worker per process is deployed; its rows are of system
	// SystemClientProcs instead of SystemProcess.
	ClientProcs bool
	// Grants: GrantsOff ("" too) runs the in-process cluster without
	// data-path grants; GrantsOn with them (the master signs, the nodes
	// check; rows SystemGrants); GrantsBoth runs both clusters, alternated
	// round by round, so their ratio comes from one run.
	Grants string
	// Ops, when set, limits the phases to these (put, batch-put, get,
	// batch-get, get-into, exist); the put phase always runs before gets.
	Ops []string
	// Device "cuda" adds the phases put-device and get-into-device: each
	// client puts from and gets into a buffer of GPU memory (device 0 of
	// the CUDA driver at CUDALib, "" libcuda.so.1) through
	// store.PutFromDevice and GetIntoDevice (device.go). "" or "cpu": none.
	Device  string
	CUDALib string
}

// runs reports whether op is one of the configured phases.
func (c Config) runs(op string) bool { return len(c.Ops) == 0 || slices.Contains(c.Ops, op) }

// Grants settings (Config.Grants).
const (
	GrantsOff  = "off"
	GrantsOn   = "on"
	GrantsBoth = "both"
)

// Validate checks the run before anything starts.
func (c Config) Validate() error {
	if len(c.Sizes) == 0 || len(c.Clients) == 0 {
		return errors.New("bench store: no sizes or no client counts")
	}
	for _, s := range c.Sizes {
		if s <= 0 {
			return fmt.Errorf("bench store: bad size %d", s)
		}
	}
	for _, n := range c.Clients {
		if n < 1 || n > 64 {
			return fmt.Errorf("bench store: bad client count %d", n)
		}
	}
	switch c.Servers {
	case "", ServersInProcess, ServersProcess, ServersBoth:
	default:
		return fmt.Errorf("bench store: --servers %q: want inproc, process or both", c.Servers)
	}
	if c.ClientProcs && c.Servers != ServersProcess && c.Servers != ServersBoth {
		return errors.New("bench store: --client-procs needs --servers process or both")
	}
	for _, op := range c.Ops {
		if !slices.Contains([]string{"put", "batch-put", "get", "batch-get", "get-into", "exist"}, op) {
			return fmt.Errorf("bench store: --ops: unknown phase %q", op)
		}
	}
	switch c.Grants {
	case "", GrantsOff, GrantsOn, GrantsBoth:
	default:
		return fmt.Errorf("bench store: --grants %q: want off, on or both", c.Grants)
	}
	if c.Nodes < 1 || c.Duration <= 0 || c.Rounds < 1 || c.SegmentSize == 0 {
		return errors.New("--nodes, --rounds and --duration must be positive")
	}
	return c.validateDevice()
}

// Row is one phase's figures (the median round of its configuration).
type Row struct {
	System   string // SystemInProcess, SystemProcess or SystemRedis
	Op       string // put, batch-put, get, batch-get, get-into (mooncake only), exist
	Size     int    // value bytes
	Clients  int
	Ops      int           // keys moved
	Elapsed  time.Duration // measured time
	P50, P99 time.Duration // per call (batch-*: per call of BatchKeys keys; exist: of ExistKeys keys, Redis: per request of the pipeline)
	Errors   int
	FirstErr error
	// CPU is the CPU time (user + system) this process spent during the
	// phase: with the servers in process (SystemInProcess, SystemGrants)
	// it covers master, nodes and clients, so CPU per key compares two
	// configurations even on a machine whose other load makes ops/s noisy.
	CPU time.Duration
	// ServerCPU is the CPU time of the server processes during the
	// phase: master and nodes (SystemProcess, SystemClientProcs), or
	// redis-server (SystemRedis, when the bench started it); 0 otherwise.
	// For SystemClientProcs CPU is the client processes' and for
	// SystemRedis redis-benchmark's, so CPU + ServerCPU is all the CPU a
	// phase took.
	ServerCPU time.Duration
}

// CPUPerOp is the process CPU time per key.
func (r Row) CPUPerOp() time.Duration {
	if r.Ops == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Ops)
}

// cpuTime is this process's CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// OpsPerSec is keys per second.
func (r Row) OpsPerSec() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }

// GBps is value bytes per second, in GB/s.
func (r Row) GBps() float64 {
	return float64(r.Ops) * float64(r.Size) / r.Elapsed.Seconds() / 1e9
}

// Utilisation is the segment utilisation reached before the first eviction.
type Utilisation struct {
	Watermark float64 // the master's high watermark
	Used      float64 // used/capacity when the first eviction ran
}

// Result is one run's figures.
type Result struct {
	MemcpyGBps float64 // single-thread memcpy, the machine's limit
	// RedisSkipped says why Redis was not measured (nil when it was, or
	// when Config.Redis is off).
	RedisSkipped error
	Rows         []Row // in the order the phases first ran
	Utilisation  []Utilisation
	// Grants (Config.Grants GrantsBoth): each phase's on/off ratios,
	// round by round.
	Grants []PairedPhase
}

// PairedPhase is one phase measured on two in-process clusters in every
// round (GrantsBoth: without grants, off, and with them, on).
type PairedPhase struct {
	Op            string
	Size, Clients int
	Ops, CPU      Ratios // on's ops/s and CPU time per key over off's, round by round
}

// FindGrants returns the grants on/off ratios of op, size and clients, nil
// if none.
func (r *Result) FindGrants(op string, size, clients int) *PairedPhase {
	for i := range r.Grants {
		if p := &r.Grants[i]; p.Op == op && p.Size == size && p.Clients == clients {
			return p
		}
	}
	return nil
}

// Find returns the row of system, op, size and clients, nil if none.
func (r *Result) Find(system, op string, size, clients int) *Row {
	for i := range r.Rows {
		w := &r.Rows[i]
		if w.System == system && w.Op == op && w.Size == size && w.Clients == clients {
			return w
		}
	}
	return nil
}

// Run starts a master and cfg.Nodes storage nodes in this process, one
// store client per concurrent client and, per Config.Redis, a Redis, then
// runs every phase of every size and client count for cfg.Rounds rounds,
// alternating the systems, and last measures the utilisation reached
// before the first eviction (watermarks 0.90 and 1.0).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	res := &Result{MemcpyGBps: limits.Memcpy(64<<20, 0, 250*time.Millisecond)}

	maxClients := slices.Max(cfg.Clients)
	maxSize := slices.Max(cfg.Sizes)
	var clusters []cluster
	defer func() {
		for _, c := range clusters {
			c.close()
		}
	}()
	if cfg.Servers == "" || cfg.Servers == ServersInProcess || cfg.Servers == ServersBoth {
		if cfg.Grants != GrantsOn {
			c, err := inProcessCluster(ctx, cfg, maxClients, maxSize, nil)
			if err != nil {
				return nil, err
			}
			clusters = append(clusters, c)
		}
		if cfg.Grants == GrantsOn || cfg.Grants == GrantsBoth {
			keys, err := grant.ParseKeys([]byte("1:" + grant.NewKeyHex()))
			if err != nil {
				return nil, err
			}
			c, err := inProcessCluster(ctx, cfg, maxClients, maxSize, keys)
			if err != nil {
				return nil, err
			}
			clusters = append(clusters, c)
		}
	}
	if cfg.Servers == ServersProcess || cfg.Servers == ServersBoth {
		c := cluster{system: SystemProcess}
		addr, stop, pids, err := startServerProcs(ctx, cfg.Binary, cfg.Nodes, cfg.SegmentSize, cfg.Transport)
		if err != nil {
			return nil, err
		}
		c.stop, c.pids = stop, pids
		clusters = append(clusters, c)
		last := &clusters[len(clusters)-1]
		if !cfg.ClientProcs {
			if last.mc, err = openClients(ctx, addr, maxClients, maxSize, cfg); err != nil {
				return nil, err
			}
		} else {
			last.system = SystemClientProcs
			// One client in this process for the bench's own calls
			// (removing a round's keys); the measured ones are processes.
			if last.mc, err = openClients(ctx, addr, 1, maxSize, cfg); err != nil {
				return nil, err
			}
			if last.procs, err = startClientProcs(ctx, cfg.Binary, addr, maxClients, maxSize, cfg.Transport); err != nil {
				return nil, err
			}
		}
	}

	// Warm-up, not measured: a client's first transfer to a node fetches
	// the node's descriptor and maps its shared memory (a one-off stall of
	// up to ~0.5 s that would land in the first round's put phase).
	for _, c := range clusters {
		prefix := "bench-warmup/" + c.system
		if _, err := c.runPhase(ctx, len(c.mc)+len(c.procs), "put", 4096, 4*cfg.Nodes, prefix, 0); err != nil {
			return nil, err
		}
		_, _ = c.mc[0].cl.RemoveByRegex(ctx, "^"+prefix+"/", true)
	}

	rb, stopRedis, err := startRedis(ctx, cfg.Redis)
	if err != nil {
		res.RedisSkipped = err
	}
	if stopRedis != nil {
		defer stopRedis()
	}

	capacity := uint64(cfg.Nodes) * cfg.SegmentSize
	type phaseKey struct {
		system, op    string
		size, clients int
	}
	rounds := map[phaseKey][]Row{}
	var order []phaseKey
	add := func(r Row) {
		k := phaseKey{r.System, r.Op, r.Size, r.Clients}
		if len(rounds[k]) == 0 {
			order = append(order, k)
		}
		rounds[k] = append(rounds[k], r)
	}
	rates := map[phaseKey]float64{} // Redis ops/s of the last round, to size the next
	for _, size := range cfg.Sizes {
		for _, n := range cfg.Clients {
			// Each client owns a key set; together they take a quarter of the pool.
			perClient := max(2, min(256, int(capacity/4/uint64(size))/n))
			// Rounds alternate the systems so that a burst of load on this
			// shared machine hits both, and which of them goes first (what
			// one leaves behind, a removal's aftermath or a collection due,
			// lands on the next); the median round is reported.
			for round := range cfg.Rounds {
				order := slices.Clone(clusters)
				if round%2 == 1 {
					slices.Reverse(order)
				}
				for _, c := range order {
					prefix := fmt.Sprintf("bench/%s/%d/%d/r%d", c.system, size, n, round)
					// Every put phase runs before the get phases: a get leases its
					// key (10s), and a leased key cannot be overwritten.
					for _, op := range []string{"put", "batch-put", "put-device", "get", "batch-get", "get-into", "get-into-device", "exist"} {
						if strings.HasPrefix(op, "batch") && size > 1<<20 || strings.HasSuffix(op, "device") && c.mc[0].dev == nil || !cfg.runs(op) && op != "put" {
							continue
						}
						r, err := c.runPhase(ctx, n, op, size, perClient, prefix, cfg.Duration)
						if err != nil {
							return nil, err
						}
						add(r)
					}
					_, _ = c.mc[0].cl.RemoveByRegex(ctx, "^"+prefix+"/", true)
				}
				if rb == nil {
					continue
				}
				// Redis's clients as redis-benchmark's connections in one
				// process and, next to client processes of ours, as as
				// many processes of one connection each.
				topologies := []bool{false}
				if cfg.ClientProcs {
					topologies = append(topologies, true)
				}
				for _, procs := range topologies {
					set := redisSet{size: size, clients: n, keys: n * perClient, procs: procs}
					for _, op := range []string{"put", "batch-put", "get", "batch-get", "exist"} {
						if strings.HasPrefix(op, "batch") && size > 1<<20 || !cfg.runs(op) && op != "put" {
							continue
						}
						k := phaseKey{set.system(), op, size, n}
						r, rate, err := rb.phase(ctx, &set, op, rates[k], cfg.Duration)
						if err != nil {
							return nil, fmt.Errorf("redis: %w", err)
						}
						rates[k] = rate
						add(r)
					}
					if err := rb.flushAll(ctx); err != nil {
						return nil, fmt.Errorf("redis: %w", err)
					}
				}
			}
		}
	}
	for _, k := range order {
		if k.system != SystemGrants {
			continue
		}
		// The rows of a phase are in round order, one a round.
		ops, cpu := pairRatios(rounds[phaseKey{SystemInProcess, k.op, k.size, k.clients}], rounds[k])
		res.Grants = append(res.Grants, PairedPhase{Op: k.op, Size: k.size, Clients: k.clients, Ops: ops, CPU: cpu})
	}
	for _, k := range order {
		rs := rounds[k]
		slices.SortFunc(rs, func(a, b Row) int { return cmp.Compare(a.GBps(), b.GBps()) })
		res.Rows = append(res.Rows, rs[len(rs)/2])
	}
	for _, wm := range []float64{0.90, 1.0} {
		u, err := measureUtilisation(ctx, wm, cfg.Transport)
		if err != nil {
			return nil, err
		}
		res.Utilisation = append(res.Utilisation, Utilisation{Watermark: wm, Used: u})
	}
	return res, nil
}

// runPhase runs op on n clients for d and gathers throughput and latency.
func runPhase(ctx context.Context, system string, cls []*mooncakeKV, op string, size, perClient int, prefix string, d time.Duration) Row {
	res := Row{System: system, Op: op, Size: size, Clients: len(cls)}
	runs := make([]clientRun, len(cls))
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), cpuTime()
	deadline := start.Add(d)
	for ci, cl := range cls {
		wg.Go(func() { runs[ci] = runClient(ctx, ci, cl, op, size, perClient, prefix, deadline) })
	}
	wg.Wait()
	res.Elapsed, res.CPU = time.Since(start), cpuTime()-cpu0
	res.gather(runs)
	return res
}

// clientRun is what one client did in a phase.
type clientRun struct {
	Lats     []time.Duration // of each successful call
	Keys     int             // keys moved by the successful calls
	Errors   int
	FirstErr string
}

// gather adds the clients' runs to r: keys, errors, the first error and
// the latency percentiles.
func (r *Row) gather(runs []clientRun) {
	var lats []time.Duration
	for _, cr := range runs {
		lats = append(lats, cr.Lats...)
		r.Ops += cr.Keys
		r.Errors += cr.Errors
		if r.FirstErr == nil && cr.FirstErr != "" {
			r.FirstErr = errors.New(cr.FirstErr)
		}
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		r.P50 = lats[len(lats)/2]
		r.P99 = lats[min(len(lats)-1, len(lats)*99/100)]
	}
}

// runClient is client number ci's loop of op until deadline (put phases:
// at least once over its key set, in order; "upsert": puts of random keys
// of the set, as gets read them).
func runClient(ctx context.Context, ci int, cl *mooncakeKV, op string, size, perClient int, prefix string, deadline time.Time) clientRun {
	v := make([]byte, size)
	for i := range v {
		v[i] = byte(i*13 + ci)
	}
	r := rand.New(rand.NewPCG(uint64(ci), 7))
	var names, existKeys []string
	if op == "exist" {
		names, existKeys = make([]string, perClient), make([]string, ExistKeys)
		for k := range names {
			names[k] = fmt.Sprintf("%s/%d/%d", prefix, ci, k)
		}
	}
	var run clientRun
	for i := 0; time.Now().Before(deadline) || i < perClient && (op == "put" || op == "put-device"); i++ {
		if ctx.Err() != nil {
			break
		}
		k := i % perClient
		if op != "put" && op != "put-device" {
			k = r.IntN(perClient)
		}
		key := fmt.Sprintf("%s/%d/%d", prefix, ci, k)
		t0 := time.Now()
		var err error
		keysDone := 1
		switch op {
		case "exist":
			for j := range existKeys {
				existKeys[j] = names[r.IntN(perClient)]
			}
			err = cl.exist(ctx, existKeys)
			keysDone = ExistKeys
		case "batch-put", "batch-get":
			nb := min(BatchKeys, perClient)
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
		case "put", "upsert": // upsert: random keys of the set, no pass over all of them
			err = cl.put(ctx, key, v)
		case "put-device":
			err = cl.putDevice(ctx, key, size)
		case "get-into-device":
			var n int
			n, err = cl.getIntoDevice(ctx, key)
			if err == nil && n != size {
				err = fmt.Errorf("got %d bytes, want %d", n, size)
			}
		case "get-into":
			var n int
			n, err = cl.getInto(ctx, key)
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
			run.Errors++
			if run.FirstErr == "" {
				run.FirstErr = err.Error()
			}
			continue
		}
		run.Lats = append(run.Lats, time.Since(t0))
		run.Keys += keysDone
	}
	return run
}

// cluster is one master and its storage nodes, with the bench's clients.
type cluster struct {
	system string        // SystemInProcess, SystemProcess or SystemClientProcs
	mc     []*mooncakeKV // the clients (SystemClientProcs: one, for the bench's own calls)
	procs  []*clientProc // SystemClientProcs: the measured clients
	pids   []int         // the server processes (none in process)
	stop   func()        // stops the servers
}

// runPhase runs op on the cluster's first n clients (processes when it
// has them) for d.
func (c cluster) runPhase(ctx context.Context, n int, op string, size, perClient int, prefix string, d time.Duration) (Row, error) {
	cpu0 := procCPU(c.pids...)
	var r Row
	if len(c.procs) > 0 {
		var err error
		if r, err = runProcPhase(ctx, c.system, c.procs[:min(n, len(c.procs))], op, size, perClient, prefix, d); err != nil {
			return r, err
		}
	} else {
		r = runPhase(ctx, c.system, c.mc[:min(n, len(c.mc))], op, size, perClient, prefix, d)
	}
	if len(c.pids) > 0 {
		r.ServerCPU = procCPU(c.pids...) - cpu0
	}
	return r, nil
}

func (c cluster) close() {
	stopClientProcs(c.procs)
	for _, m := range c.mc {
		m.close()
	}
	if c.stop != nil {
		c.stop()
	}
}

// inProcessCluster starts a master and cfg.Nodes storage nodes in this
// process and n clients; with keys, the master signs grants and the nodes
// check them (rows SystemGrants).
func inProcessCluster(ctx context.Context, cfg Config, n, maxSize int, keys *grant.Keyring) (c cluster, err error) {
	c.system = SystemInProcess
	var verifier *grant.Verifier
	if keys != nil {
		c.system, verifier = SystemGrants, grant.NewVerifier(keys, nil)
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	srv, err := masterserver.Start(masterserver.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond, Grants: keys})
	if err != nil {
		return c, err
	}
	var ns []*storenode.Node
	c.stop = func() {
		for _, n := range ns {
			n.Close()
		}
		srv.Close()
	}
	for range cfg.Nodes {
		nd, err := storenode.Start(ctx, storenode.Config{Master: srv.Addr(), SegmentSize: cfg.SegmentSize,
			Engine: transfer.Config{Transport: cfg.Transport, Grants: verifier}, UnmountGrace: 100 * time.Millisecond})
		if err != nil {
			return c, err
		}
		ns = append(ns, nd)
	}
	c.mc, err = openClients(ctx, srv.Addr(), n, maxSize, cfg)
	return c, err
}

// openClients opens n store clients of the master at addr, each with its
// own transfer engine and a registered buffer of maxSize bytes.
func openClients(ctx context.Context, addr string, n, maxSize int, cfg Config) ([]*mooncakeKV, error) {
	var mc []*mooncakeKV
	for range n {
		eng, err := transfer.Open(ctx, transfer.Config{Transport: cfg.Transport})
		if err != nil {
			closeAll(mc)
			return nil, err
		}
		scfg := store.Config{Master: addr, Mover: eng, LocalBufferSize: uint64(2*maxSize + 1<<20), UnmountGrace: 100 * time.Millisecond}
		dev, err := cfg.deviceBuffer(&scfg, maxSize)
		if err != nil {
			eng.Close()
			closeAll(mc)
			return nil, err
		}
		cl, err := store.New(ctx, scfg)
		if err != nil {
			eng.Close()
			closeAll(mc)
			return nil, err
		}
		kv := &mooncakeKV{cl: cl, eng: eng, buf: make([]byte, maxSize), dev: dev}
		mc = append(mc, kv)
		if err := cl.RegisterBuffer(kv.buf); err != nil {
			closeAll(mc)
			return nil, err
		}
	}
	return mc, nil
}

func closeAll(mc []*mooncakeKV) {
	for _, m := range mc {
		m.close()
	}
}

// mooncakeKV is one store client with its own transfer engine; buf is
// registered memory for GetInto.
type mooncakeKV struct {
	cl  *store.Client
	eng *transfer.Engine
	buf []byte
	dev *deviceBuf // GPU memory of the device phases (nil without)
}

func (m *mooncakeKV) close() {
	m.cl.Close()
	m.eng.Close()
	m.dev.free()
}

// getInto reads into the client's registered buffer (zero copy, no allocation).
func (m *mooncakeKV) getInto(ctx context.Context, key string) (int, error) {
	return m.cl.GetInto(ctx, key, m.buf)
}

func (m *mooncakeKV) put(ctx context.Context, key string, v []byte) error {
	return m.cl.PutWith(ctx, key, v, store.PutOptions{Upsert: true})
}

func (m *mooncakeKV) get(ctx context.Context, key string) ([]byte, error) { return m.cl.Get(ctx, key) }

// exist is one BatchExist of keys, which the put phase stored.
func (m *mooncakeKV) exist(ctx context.Context, keys []string) error {
	ok, err := m.cl.BatchExist(ctx, keys)
	if err != nil {
		return err
	}
	for i, e := range ok {
		if !e {
			return fmt.Errorf("%s: not found", keys[i])
		}
	}
	return nil
}

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

// measureUtilisation fills a fresh 2 x 64 MiB pool with mixed-size values
// until the first eviction runs and returns used/capacity at that moment.
func measureUtilisation(ctx context.Context, watermark float64, transport string) (float64, error) {
	srv, err := masterserver.Start(masterserver.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond,
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
