package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvcache-go/mooncake/store"
)

// RemovePattern matches the even-numbered loaded keys (the remove phase).
const RemovePattern = `^obj/[0-9]{8}[02468]$`

// run is the state of one Run.
type run struct {
	cfg   Config
	log   *slog.Logger
	res   *Result
	c     *cluster
	redis *redisServer
	etcd  *etcdServer // HA runs
	haID  string      // HA runs: the cluster id (the baseline's has a suffix)
	rconn []*respConn // OpsClients connections of the get/put load (nil: no Redis)

	removed  bool // the remove phase removed the even keys
	present  int  // loaded objects present after the last phase that counted them
	opsReady bool // the get/put load's get keys are written
	rOpsOK   bool // the same in Redis
}

// Run starts the processes, runs the selected phases (load always first)
// and stops every process it started, on every path. A phase that fails
// is recorded in Result.Failures and the next one runs; only a failure to
// start the pool or to load it is returned as an error.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	seg := SegmentSize(cfg.Objects, cfg.ValueSize, cfg.Nodes, cfg.WorkerClients*cfg.Workers)
	r := &run{cfg: cfg, log: log, res: &Result{Objects: cfg.Objects, Clients: cfg.Clients, ValueSize: cfg.ValueSize,
		Nodes: cfg.Nodes, SegmentSize: seg, ObjectBytes: ObjectBytes(cfg.ValueSize), Pinned: cfg.Pin}}

	var err error
	if r.redis, err = startRedis(ctx, cfg.Redis); err != nil {
		r.res.RedisSkipped = err.Error()
	} else if r.redis == nil {
		r.res.RedisSkipped = "--redis off"
	} else {
		defer r.redis.stop()
	}

	if cfg.HA {
		if r.etcd, err = startEtcd(ctx, cfg.Etcd); err != nil {
			return nil, fmt.Errorf("bench master: --ha: %w", err)
		}
		defer r.etcd.stop()
		r.haID = fmt.Sprintf("bench-%d-%d", os.Getpid(), time.Now().UnixNano())
		r.res.HA = &HASetup{Etcd: r.etcd.endpoints, Cluster: r.haID, Lease: cfg.HALease, Candidates: candidates}
	}

	if cfg.Baseline > 0 && cfg.runs(PhaseOps) {
		log.Info("baseline: ops phase on a fresh pool", "objects", cfg.Baseline)
		if err := r.baseline(ctx); err != nil {
			r.fail("baseline", err)
		}
	}

	log.Info("starting master and storage nodes", "nodes", cfg.Nodes, "segment_size", seg)
	if r.c, err = startCluster(ctx, r.clusterConfig(seg, "")); err != nil {
		return nil, err
	}
	defer func() {
		for _, rc := range r.rconn {
			rc.close()
		}
		r.c.close()
	}()

	log.Info("load", "objects", cfg.Objects, "clients", cfg.Clients)
	if r.res.Load, err = r.load(ctx); err != nil {
		return r.res, fmt.Errorf("bench master: load: %w", err)
	}
	r.present = r.res.Load.Puts
	r.snapshot(ctx, PhaseLoad)
	phases := []struct {
		name string
		f    func(context.Context) error
	}{
		{PhaseOps, r.ops}, {PhaseBulk, r.bulk}, {PhaseRemove, r.remove}, {PhaseRestart, r.restart}, {PhaseFailover, r.failover},
		{PhaseRemoveAll, r.removeAll}, {PhaseClients, r.clients},
	}
	for _, p := range phases {
		if !cfg.runs(p.name) {
			continue
		}
		if ctx.Err() != nil {
			return r.res, ctx.Err()
		}
		log.Info(p.name)
		pctx, cancel := context.WithTimeout(ctx, cfg.PhaseTimeout)
		err := p.f(pctx)
		cancel()
		if err != nil {
			r.fail(p.name, err)
		}
		r.snapshot(ctx, p.name)
	}
	return r.res, nil
}

// clusterConfig is the cluster of this run with segments of seg bytes;
// an HA cluster's id gets idSuffix.
func (r *run) clusterConfig(seg uint64, idSuffix string) clusterConfig {
	cc := clusterConfig{bin: r.cfg.Binary, transport: r.cfg.Transport, nodes: r.cfg.Nodes, segSize: seg,
		clients: max(r.cfg.Clients, OpsClients), ctlRPCTimeout: r.cfg.RPCTimeout}
	if r.cfg.HA {
		cc.ha = &haConfig{etcd: r.etcd.endpoints, id: r.haID + idSuffix, lease: r.cfg.HALease}
	}
	return cc
}

// snapshot records the master's summary after phase.
func (r *run) snapshot(ctx context.Context, phase string) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := r.c.admin.summary(sctx)
	sn := Snapshot{Phase: phase, Objects: s.Objects, Segments: s.Segments, Clients: s.Clients, Used: s.Memory.Used,
		Capacity: s.Memory.Capacity, Evictions: s.Counters.Evictions, ClientsDropped: s.Counters.ClientsDropped,
		PutsTimedOut: s.Counters.PutsTimedOut, EvictionRuns: s.Counters.EvictionRuns, FirstEvictionUse: s.Utilisation}
	if err != nil {
		sn.Err = err.Error()
	}
	r.res.After = append(r.res.After, sn)
}

func (r *run) fail(phase string, err error) {
	r.log.Warn("phase failed", "phase", phase, "err", err)
	r.res.Failures = append(r.res.Failures, phase+": "+err.Error())
}

// baseline runs the ops phase on a fresh pool of cfg.Baseline objects.
func (r *run) baseline(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PhaseTimeout)
	defer cancel()
	seg := SegmentSize(r.cfg.Baseline, r.cfg.ValueSize, r.cfg.Nodes, 0)
	c, err := startCluster(ctx, r.clusterConfig(seg, "-baseline"))
	if err != nil {
		return err
	}
	defer c.close()
	puts, errs, _, err := loadStore(ctx, c.cls[:r.cfg.Clients], r.cfg.Baseline, r.cfg.ValueSize, r.cfg.Pin)
	if err != nil {
		return err
	}
	if errs > 0 || puts != r.cfg.Baseline {
		return fmt.Errorf("loaded %d of %d objects (%d errors)", puts, r.cfg.Baseline, errs)
	}
	if err := preloadOps(ctx, c.opsClients(), opsPrefix, OpsKeys, r.cfg.Pin); err != nil {
		return err
	}
	f := opsLoad(ctx, c.opsClients(), opsPrefix, OpsKeys, r.cfg.Duration, nil).figures("mooncake", OpsClients)
	r.res.Baseline, r.res.BaseN = &f, r.cfg.Baseline
	return nil
}

// loadStore puts keys 0..n-1 with values of size bytes by BatchPut from
// cls in parallel (hard-pinned if pin) and returns the keys stored, the keys that failed and
// the first error among them, and the time it took.
func loadStore(ctx context.Context, cls []*client, n, size int, pin bool) (puts, errs int, took time.Duration, firstErr error) {
	batch := loadBatch(size)
	v := make([]byte, size)
	for i := range v {
		v[i] = byte(i*7 + 1)
	}
	var (
		next        atomic.Int64
		nPut, nErrs atomic.Int64
		once        sync.Once
		wg          sync.WaitGroup
	)
	start := time.Now()
	for _, cl := range cls {
		wg.Go(func() {
			keys := make([]string, 0, batch)
			vals := make([][]byte, batch)
			for i := range vals {
				vals[i] = v
			}
			for ctx.Err() == nil {
				lo := int(next.Add(int64(batch))) - batch
				if lo >= n {
					return
				}
				keys = keys[:0]
				for i := lo; i < min(lo+batch, n); i++ {
					keys = append(keys, key(i))
				}
				ok := 0
				for _, err := range cl.cl.BatchPut(ctx, keys, vals[:len(keys)], store.PutOptions{HardPin: pin}) {
					if err != nil {
						once.Do(func() { firstErr = err })
						continue
					}
					ok++
				}
				nPut.Add(int64(ok))
				nErrs.Add(int64(len(keys) - ok))
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil && firstErr == nil {
		firstErr = ctx.Err()
	}
	return int(nPut.Load()), int(nErrs.Load()), time.Since(start), firstErr
}

// load is the load phase (store, then Redis) with the master's memory per
// object.
func (r *run) load(ctx context.Context) (*LoadResult, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PhaseTimeout)
	defer cancel()
	c := r.c
	lr := &LoadResult{}
	var err error
	if lr.RSSBefore, err = vmRSS(c.master.pid()); err != nil {
		return nil, err
	}
	heapBefore, exposed, err := c.admin.heapInuse(ctx)
	if err != nil {
		return nil, err
	}
	var firstErr error
	lr.Puts, lr.Errors, lr.Elapsed, firstErr = loadStore(ctx, c.cls[:r.cfg.Clients], r.cfg.Objects, r.cfg.ValueSize, r.cfg.Pin)
	if firstErr != nil {
		lr.FirstErr = firstErr.Error()
	}
	lr.PutsPerSec = float64(lr.Puts) / lr.Elapsed.Seconds()
	if lr.RSSAfter, err = vmRSS(c.master.pid()); err != nil {
		return nil, err
	}
	n := float64(r.cfg.Objects)
	lr.RSSPerObject = (float64(lr.RSSAfter) - float64(lr.RSSBefore)) / n
	heapAfter, _, err := c.admin.heapInuse(ctx)
	if err != nil {
		return nil, err
	}
	if lr.HeapExposed = exposed; exposed {
		lr.HeapPerObject = (float64(heapAfter) - float64(heapBefore)) / n
	}
	if lr.Puts == 0 {
		return lr, fmt.Errorf("no object stored: %s", lr.FirstErr)
	}
	if r.redis != nil {
		if lr.Redis, err = r.loadRedis(ctx); err != nil {
			r.fail("load (redis)", err)
		}
	}
	return lr, nil
}

// loadRedis SETs the same keys and values into Redis from as many
// connections, pipelined by the load batch, and reads used_memory around it.
func (r *run) loadRedis(ctx context.Context) (*RedisLoad, error) {
	ctl, err := dialRedis(ctx, r.redis.addr)
	if err != nil {
		return nil, err
	}
	defer ctl.close()
	if _, err := ctl.do([]byte("FLUSHALL")); err != nil {
		return nil, err
	}
	rl := &RedisLoad{}
	if rl.UsedBefore, err = ctl.usedMemory(); err != nil {
		return nil, err
	}
	conns := make([]*respConn, r.cfg.Clients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	for i := range conns {
		if conns[i], err = dialRedis(ctx, r.redis.addr); err != nil {
			return nil, err
		}
	}
	n, batch := r.cfg.Objects, loadBatch(r.cfg.ValueSize)
	v := make([]byte, r.cfg.ValueSize)
	for i := range v {
		v[i] = byte(i*7 + 1)
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	errs := make([]error, len(conns))
	start := time.Now()
	for ci, rc := range conns {
		wg.Go(func() {
			keys := make([][]byte, 0, batch)
			for ctx.Err() == nil {
				lo := int(next.Add(int64(batch))) - batch
				if lo >= n {
					return
				}
				keys = keys[:0]
				for i := lo; i < min(lo+batch, n); i++ {
					keys = append(keys, []byte(key(i)))
				}
				if err := rc.setPipelined(keys, v); err != nil {
					errs[ci] = err
					return
				}
			}
			errs[ci] = ctx.Err()
		})
	}
	wg.Wait()
	rl.Elapsed = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rl.SetsPerSec = float64(n) / rl.Elapsed.Seconds()
	if rl.UsedAfter, err = ctl.usedMemory(); err != nil {
		return nil, err
	}
	rl.BytesPerKey = (float64(rl.UsedAfter) - float64(rl.UsedBefore)) / float64(n)
	return rl, nil
}

// ensureOps writes the get/put load's get keys once, in the store and in
// Redis, and opens the Redis connections.
func (r *run) ensureOps(ctx context.Context) error {
	if !r.opsReady {
		if err := preloadOps(ctx, r.c.opsClients(), opsPrefix, OpsKeys, r.cfg.Pin); err != nil {
			return err
		}
		r.opsReady = true
	}
	if r.redis != nil && !r.rOpsOK {
		for len(r.rconn) < OpsClients {
			rc, err := dialRedis(ctx, r.redis.addr)
			if err != nil {
				return err
			}
			r.rconn = append(r.rconn, rc)
		}
		if err := preloadOps(ctx, r.rconn, opsPrefix, OpsKeys, false); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		r.rOpsOK = true
	}
	return nil
}

// ops is the get/put load at N, then on Redis.
func (r *run) ops(ctx context.Context) error {
	if err := r.ensureOps(ctx); err != nil {
		return err
	}
	o := &OpsResult{Mooncake: opsLoad(ctx, r.c.opsClients(), opsPrefix, OpsKeys, r.cfg.Duration, nil).figures("mooncake", OpsClients)}
	if r.rOpsOK {
		f := opsLoad(ctx, r.rconn, opsPrefix, OpsKeys, r.cfg.Duration, nil).figures("redis", OpsClients)
		o.Redis = &f
	}
	r.res.Ops = o
	return ctx.Err()
}

// bulk lists every loaded key by pages under the get/put load while
// polling the admin endpoints, then checks that no node was dropped and no
// object lost; on Redis, SCAN under the same load.
func (r *run) bulk(ctx context.Context) error {
	if err := r.ensureOps(ctx); err != nil {
		return err
	}
	c := r.c
	before, err := c.admin.summary(ctx)
	if err != nil {
		return err
	}
	b := &BulkResult{}
	r.res.Bulk = b

	pollStop, pollDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pollDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			for _, p := range []struct {
				path string
				max  *time.Duration
			}{{"/api/summary", &b.SummaryMax}, {"/dashboard/", &b.DashboardMax}} {
				t0 := time.Now()
				if _, err := c.admin.get(ctx, p.path); err != nil {
					b.PollErrors++
					if b.PollFirstErr == "" {
						b.PollFirstErr = err.Error()
					}
				}
				*p.max = max(*p.max, time.Since(t0))
			}
			b.Polls++
			select {
			case <-pollStop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	stopLoad := backgroundOps(ctx, c.opsClients(), opsPrefix, OpsKeys)
	start := time.Now()
	var listErr error
	for b.Listings == 0 || time.Since(start) < r.cfg.Duration {
		t0 := time.Now()
		n, err := c.listAll(ctx, "obj/")
		if err != nil {
			listErr = err
			break
		}
		if b.Listings == 0 {
			b.ListTime = time.Since(t0)
		}
		b.Listings++
		b.Counted = append(b.Counted, n)
	}
	load := stopLoad()
	close(pollStop)
	<-pollDone
	b.Load = load.figures("mooncake", OpsClients)
	if r.res.Ops != nil && r.res.Ops.Mooncake.GetP99 > 0 {
		b.GetP99Ratio = float64(b.Load.GetP99) / float64(r.res.Ops.Mooncake.GetP99)
	}
	if listErr != nil {
		return fmt.Errorf("list: %w", listErr)
	}
	after, err := c.admin.summary(ctx)
	if err != nil {
		return err
	}
	b.NodesDropped, b.Segments = after.Counters.ClientsDropped-before.Counters.ClientsDropped, after.Segments
	present, _, err := c.existCount(ctx, allIndices(r.cfg.Objects))
	b.Present, b.Lost = len(present), r.res.Load.Puts-len(present)
	r.present = len(present)
	if err != nil {
		return fmt.Errorf("exist: %w", err)
	}
	if r.rOpsOK {
		rb, err := r.bulkRedis(ctx)
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		b.Redis = rb
	}
	var bad []string
	for _, n := range b.Counted {
		if n != r.res.Load.Puts {
			bad = append(bad, fmt.Sprintf("a listing counted %d keys, want %d", n, r.res.Load.Puts))
			break
		}
	}
	if b.Lost > 0 {
		bad = append(bad, fmt.Sprintf("%d objects lost", b.Lost))
	}
	if b.NodesDropped > 0 || b.Segments != r.cfg.Nodes {
		bad = append(bad, fmt.Sprintf("%d clients dropped, %d of %d segments mounted", b.NodesDropped, b.Segments, r.cfg.Nodes))
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// bulkRedis SCANs every loaded key of Redis under the get/put load.
func (r *run) bulkRedis(ctx context.Context) (*RedisBulk, error) {
	ctl, err := dialRedis(ctx, r.redis.addr)
	if err != nil {
		return nil, err
	}
	defer ctl.close()
	stopLoad := backgroundOps(ctx, r.rconn, opsPrefix, OpsKeys)
	t0 := time.Now()
	n, err := ctl.scanCount("obj/*", ListPage)
	took := time.Since(t0)
	load := stopLoad()
	if err != nil {
		return nil, err
	}
	return &RedisBulk{Counted: n, ListTime: took, Load: load.figures("redis", OpsClients)}, nil
}

// remove removes the even-numbered keys by one RemoveByRegex.
func (r *run) remove(ctx context.Context) error {
	rr := &RemoveResult{Pattern: RemovePattern, Want: (r.cfg.Objects + 1) / 2}
	r.res.Remove = rr
	t0 := time.Now()
	n, err := r.c.ctl.cl.RemoveByRegex(ctx, RemovePattern, true)
	rr.Elapsed, rr.Removed = time.Since(t0), n
	removeErr := err
	if err != nil {
		rr.Err = err.Error()
	}
	// Listed after, also when the call failed: a call that timed out on
	// the client may still have removed them all on the master.
	left, err := r.c.listAll(ctx, "obj/")
	rr.ListLeft = left
	if err != nil {
		return errors.Join(removeErr, fmt.Errorf("list after: %w", err))
	}
	r.present = left
	r.removed = left == r.res.Load.Puts-rr.Want
	if removeErr != nil {
		return fmt.Errorf("%w (%d loaded keys listed after)", removeErr, left)
	}
	if n != rr.Want {
		return fmt.Errorf("removed %d objects, want %d", n, rr.Want)
	}
	return nil
}

// restart SIGKILLs the master, starts a new one on the same ports and
// waits, until cfg.RestoreTimeout after the kill, for every loaded object
// that existed before the kill to exist again; then checks that none of
// those absent before (removed, or evicted) is back.
func (r *run) restart(ctx context.Context) error {
	want, gone, err := r.c.existCount(ctx, allIndices(r.cfg.Objects))
	if err != nil {
		return fmt.Errorf("exist before the kill: %w", err)
	}
	rr := &RestartResult{Want: len(want), Deadline: r.cfg.RestoreTimeout, Removed: r.removed}
	r.res.Restart = rr
	if len(want) == 0 {
		return errors.New("no loaded object left to restore: nothing measured")
	}
	t0 := time.Now()
	deadline := t0.Add(r.cfg.RestoreTimeout)
	r.c.nodeRemounts(0) // forget the lines of earlier remounts
	if err := r.c.restartMaster(ctx, deadline); err != nil {
		return err
	}
	rr.Up = time.Since(t0)
	if err := r.c.waitMounted(ctx, len(r.c.nodes), deadline); err != nil {
		return fmt.Errorf("nodes on the new master: %w", err)
	}
	rr.Mounted = time.Since(t0)
	missing, took, counted, firstErr := r.c.waitPresent(ctx, want, t0, deadline)
	rr.Took, rr.Counted, rr.FirstErr = took, counted, firstErr
	rr.NodeRemounts, rr.MasterRestore = r.c.nodeRemounts(remountLogWait), r.c.masterRestore()
	rr.Present, rr.Recovered = len(want)-len(missing), len(missing) == 0
	r.present = rr.Present
	if rss, err := vmRSS(r.c.master.pid()); err == nil {
		rr.RSSAfter = rss
	}
	if !rr.Recovered {
		for i, n := range r.c.nodes {
			rr.NodeLog = append(rr.NodeLog, fmt.Sprintf("node %d: %s", i, n.errTail.lastLine()))
		}
		return fmt.Errorf("%d of %d objects not back within %v (first error: %s; last node log lines: %s)", len(missing), len(want),
			r.cfg.RestoreTimeout, rr.FirstErr, strings.Join(rr.NodeLog, "; "))
	}
	back, _, err := r.c.existCount(ctx, gone)
	rr.RemovedBack, rr.RemovedTested = len(back), len(gone)
	if err != nil {
		return fmt.Errorf("exist of removed keys: %w", err)
	}
	if len(back) > 0 {
		return fmt.Errorf("%d removed objects back after the restart", len(back))
	}
	return nil
}

// removeAll runs RemoveAll under the get/put load; Redis: FLUSHALL.
func (r *run) removeAll(ctx context.Context) error {
	if err := r.ensureOps(ctx); err != nil {
		return err
	}
	c := r.c
	before, err := c.admin.summary(ctx)
	if err != nil {
		return err
	}
	ra := &RemoveAllResult{Want: r.present}
	r.res.RemoveAll = ra
	stopLoad := backgroundOps(ctx, c.opsClients(), opsPrefix, OpsKeys)
	t0 := time.Now()
	n, err := c.ctl.cl.RemoveAll(ctx, true)
	ra.Elapsed, ra.Removed = time.Since(t0), n
	ra.Load = stopLoad().figures("mooncake", OpsClients)
	r.opsReady = false
	if err != nil {
		ra.Err = err.Error()
		return err
	}
	after, err := c.admin.summary(ctx)
	if err != nil {
		return err
	}
	ra.NodesDropped, ra.Segments = after.Counters.ClientsDropped-before.Counters.ClientsDropped, after.Segments
	if ra.ListLeft, err = c.listAll(ctx, "obj/"); err != nil {
		return fmt.Errorf("list after: %w", err)
	}
	if r.rOpsOK {
		t0 := time.Now()
		if _, err := r.rconn[0].do([]byte("FLUSHALL")); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		ra.Redis = &RedisFlush{Elapsed: time.Since(t0)}
		r.rOpsOK = false
	}
	switch {
	case ra.ListLeft != 0:
		return fmt.Errorf("%d loaded keys listed after RemoveAll", ra.ListLeft)
	case n < ra.Want:
		return fmt.Errorf("RemoveAll removed %d objects, want at least %d", n, ra.Want)
	}
	return nil
}

// clients times new client processes to their first get, then runs the
// get/put load from cfg.Workers processes of cfg.WorkerClients clients.
func (r *run) clients(ctx context.Context) error {
	c := r.c
	if err := c.ctl.putPinned(ctx, probeKey, opsValue()); err != nil {
		return fmt.Errorf("probe key: %w", err)
	}
	cr := &ClientsResult{Processes: r.cfg.Workers, PerProcess: r.cfg.WorkerClients}
	r.res.ManyCl = cr
	common := []string{"bench", "master", "--worker", "--master", c.grpc, "--transport", r.cfg.Transport}
	for range r.cfg.Probes {
		p, _, err := startProc(ctx, r.cfg.Binary, workerFirstOp, false, append(common, "--probe")...)
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		cr.FirstOp = append(cr.FirstOp, time.Since(p.started))
		p.wait(10 * time.Second)
	}
	if len(cr.FirstOp) > 0 {
		s := slices.Clone(cr.FirstOp)
		slices.Sort(s)
		cr.FirstOpMedian = s[len(s)/2]
	}

	var ws []*proc
	defer func() {
		for _, w := range ws {
			w.kill()
		}
	}()
	for id := range r.cfg.Workers {
		w, _, err := startProc(ctx, r.cfg.Binary, workerFirstOp, true, append(common, "--worker-id", fmt.Sprint(id),
			"--worker-clients", fmt.Sprint(r.cfg.WorkerClients), "--duration", r.cfg.Duration.String(), fmt.Sprintf("--pin=%t", r.cfg.Pin))...)
		if err != nil {
			return fmt.Errorf("worker %d: %w", id, err)
		}
		ws = append(ws, w)
	}
	for id, w := range ws {
		line, err := w.nextLine(ctx, startTimeout+time.Duration(r.cfg.WorkerClients)*time.Second)
		if err != nil || line != workerReady {
			return fmt.Errorf("worker %d: not ready: %q %v", id, line, err)
		}
	}
	for id, w := range ws {
		if _, err := fmt.Fprintln(w.stdin, "go"); err != nil {
			return fmt.Errorf("worker %d: %w", id, err)
		}
	}
	var all opsRun
	for id, w := range ws {
		line, err := w.nextLine(ctx, r.cfg.Duration+time.Minute)
		if err != nil {
			return fmt.Errorf("worker %d: no result: %w", id, err)
		}
		o, err := parseWorkerResult(line)
		if err != nil {
			return fmt.Errorf("worker %d: %w", id, err)
		}
		all.merge(o)
	}
	for _, w := range ws {
		w.wait(10 * time.Second)
	}
	ws = nil
	// Ops/s: every worker ran for about Duration at the same time.
	cr.Load = all.figures("mooncake", r.cfg.Workers*r.cfg.WorkerClients)
	if r.redis != nil {
		f, err := r.clientsRedis(ctx, r.cfg.Workers*r.cfg.WorkerClients)
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		cr.Redis = f
	}
	return nil
}

// clientsRedis runs the same get/put load from n connections of this
// process.
func (r *run) clientsRedis(ctx context.Context, n int) (*OpsFigures, error) {
	conns := make([]*respConn, 0, n)
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	for range n {
		rc, err := dialRedis(ctx, r.redis.addr)
		if err != nil {
			return nil, err
		}
		conns = append(conns, rc)
	}
	if err := preloadOps(ctx, conns, "w", WorkerKeys, false); err != nil {
		return nil, err
	}
	f := opsLoad(ctx, conns, "w", WorkerKeys, r.cfg.Duration, nil).figures("redis", n)
	return &f, nil
}
