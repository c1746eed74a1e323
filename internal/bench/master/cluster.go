package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/bench/benchproc"
	"net"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// cluster is the master and storage node processes of one run, and the
// bench's store clients.
type cluster struct {
	bin, transport string
	grpc, http     string // the address clients dial (HA: etcd://...) and the serving master's admin HTTP
	master         *proc  // the serving master (HA: the leader's process)
	ha             *haCluster
	nodes          []*proc
	admin          *admin    // the serving master's admin API (HA: the leader's)
	cls            []*client // loaders; the first OpsClients also run the get/put load
	ctl            *client   // lists, counts, removes
}

// haCluster is the `mooncake master --ha` candidates of an HA run.
type haCluster struct {
	etcd, id string        // etcd endpoints, cluster id
	lease    time.Duration // --ha-lease
	cands    []*candidate
}

// candidate is one `mooncake master --ha` process.
type candidate struct {
	p      *proc
	http   string
	admin  *admin
	paused bool // SIGSTOPped, not yet resumed
}

// clusterConfig is what startCluster starts.
type clusterConfig struct {
	bin, transport string
	nodes          int
	segSize        uint64
	clients        int
	ctlRPCTimeout  time.Duration // the control client's master call deadline (0: the store's default)
	ha             *haConfig     // nil: one plain master
}

// haConfig is the election of an HA cluster.
type haConfig struct {
	etcd, id string
	lease    time.Duration
}

// candidates is the number of master candidates of an HA cluster.
const candidates = 2

// startCluster starts the master (durable metadata, :0 ports on
// 127.0.0.1; with cfg.ha two candidates, the first waited for until it
// leads), cfg.nodes `mooncake store` processes with cfg.segSize bytes
// each, and cfg.clients store clients plus the control client.
func startCluster(ctx context.Context, cfg clusterConfig) (c *cluster, err error) {
	c = &cluster{bin: cfg.bin, transport: cfg.transport}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if cfg.ha == nil {
		if err := c.startMaster(ctx, "0", "0"); err != nil {
			return c, err
		}
	} else {
		c.ha = &haCluster{etcd: cfg.ha.etcd, id: cfg.ha.id, lease: cfg.ha.lease}
		c.grpc = "etcd://" + cfg.ha.etcd + "/" + cfg.ha.id
		for i := range candidates {
			cd, err := c.startCandidate(ctx)
			if err != nil {
				return c, err
			}
			if i == 0 {
				if err := c.waitLeader(ctx, []*candidate{cd}, time.Now().Add(startTimeout)); err != nil {
					return c, err
				}
			}
		}
	}
	for range cfg.nodes {
		n, _, err := startProc(ctx, cfg.bin, "store node mounted", false, "store", "--master", c.grpc,
			"--segment-size", strconv.FormatUint(cfg.segSize, 10), "--transport", cfg.transport,
			"--http-port", "-1", "--unmount-grace", "100ms")
		if err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, n)
	}
	for range cfg.clients {
		cl, err := openClient(ctx, c.grpc, cfg.transport, nil, 8<<20, 0)
		if err != nil {
			return c, err
		}
		c.cls = append(c.cls, cl)
	}
	c.ctl, err = openClient(ctx, c.grpc, cfg.transport, nil, 8<<20, cfg.ctlRPCTimeout)
	return c, err
}

// startMaster starts the master on the given ports of 127.0.0.1 ("0":
// free ones) with durable metadata and records the addresses it bound.
func (c *cluster) startMaster(ctx context.Context, grpcPort, httpPort string) error {
	m, line, err := startProc(ctx, c.bin, "master listening", false, "master", "--host", "127.0.0.1",
		"--port", grpcPort, "--http-port", httpPort, "--durable-metadata=true")
	if err != nil {
		return err
	}
	c.master = m
	c.grpc, c.http = benchproc.Field(line, "grpc"), benchproc.Field(line, "http")
	if c.grpc == "" || c.http == "" {
		return fmt.Errorf("master: no grpc= or http= in %q", line)
	}
	c.admin = newAdmin(c.http)
	return nil
}

// startCandidate starts one more `mooncake master --ha` candidate of the
// cluster (free ports, durable metadata) and adds it to c.ha.cands.
func (c *cluster) startCandidate(ctx context.Context) (*candidate, error) {
	p, line, err := startProc(ctx, c.bin, "master candidate", false, "master", "--ha", "--etcd", c.ha.etcd,
		"--cluster", c.ha.id, "--ha-lease", c.ha.lease.String(), "--host", "127.0.0.1", "--port", "0",
		"--http-port", "0", "--durable-metadata=true")
	if err != nil {
		return nil, err
	}
	cd := &candidate{p: p, http: benchproc.Field(line, "http")}
	c.ha.cands = append(c.ha.cands, cd)
	if cd.http == "" {
		return nil, fmt.Errorf("master candidate: no http= in %q", line)
	}
	cd.admin = newAdmin(cd.http)
	return cd, nil
}

// roleOf is a candidate's /role.
type roleOf struct {
	Role string `json:"role"`
	Addr string `json:"addr"`
	View int64  `json:"view"`
}

func (a *admin) role(ctx context.Context) (roleOf, error) {
	var r roleOf
	b, err := a.get(ctx, "/role")
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}

// haPoll is how often the candidates' /role is read while waiting for a
// leader: the resolution of the failover phase's election time.
const haPoll = 5 * time.Millisecond

// waitLeader polls the /role of cands until one reports that it leads (it
// serves: a candidate says so once its master listens and its view is
// published), makes it the serving master and returns; an error when none
// does by deadline.
func (c *cluster) waitLeader(ctx context.Context, cands []*candidate, deadline time.Time) error {
	tick := time.NewTicker(haPoll)
	defer tick.Stop()
	for {
		for _, cd := range cands {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			r, err := cd.admin.role(rctx)
			cancel()
			if err == nil && r.Role == "leader" {
				c.master, c.http, c.admin = cd.p, cd.http, cd.admin
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("no master candidate leads")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// leader is the candidate that is the serving master (nil: none).
func (c *cluster) leader() *candidate {
	for _, cd := range c.ha.cands {
		if cd.p == c.master {
			return cd
		}
	}
	return nil
}

// restartMaster SIGKILLs the master and starts a new one on the same ports.
// A port still held is retried until deadline.
func (c *cluster) restartMaster(ctx context.Context, deadline time.Time) error {
	c.master.kill()
	_, gp, _ := net.SplitHostPort(c.grpc)
	_, hp, _ := net.SplitHostPort(c.http)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.startMaster(ctx, gp, hp)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("restart master: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// close closes the clients, then stops the nodes (they unmount) and the
// master or the candidates (a paused one is resumed to handle SIGTERM).
func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, cl := range c.cls {
		wg.Go(cl.close)
	}
	if c.ctl != nil {
		wg.Go(c.ctl.close)
	}
	wg.Wait()
	for _, n := range c.nodes {
		wg.Go(n.stop)
	}
	wg.Wait()
	if c.ha == nil {
		if c.master != nil {
			c.master.stop()
		}
		return
	}
	for _, cd := range c.ha.cands {
		wg.Go(cd.p.stop)
	}
	wg.Wait()
}

// opsClients are the clients of the get/put load.
func (c *cluster) opsClients() []*client { return c.cls[:OpsClients] }

// existCount checks keys idx (key(i)) with BatchExist from every client in
// parallel and returns the indices present and absent. Calls that fail
// count their keys absent; the first error is returned with the counts.
// It keeps two calls in flight per processor of the bench (at least one
// per client): one call at a time per client leaves a many-core host's
// check bound by the calls' round trips rather than by the master, and
// more calls than that only contend on a small one.
func (c *cluster) existCount(ctx context.Context, idx []int32) (present, absent []int32, err error) {
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
		next     int
	)
	for g := range max(len(c.cls), 2*runtime.GOMAXPROCS(0)) {
		cl := c.cls[g%len(c.cls)]
		wg.Go(func() {
			keys := make([]string, 0, ExistBatch)
			for {
				mu.Lock()
				lo := next
				next += ExistBatch
				mu.Unlock()
				if lo >= len(idx) {
					return
				}
				part := idx[lo:min(lo+ExistBatch, len(idx))]
				keys = keys[:0]
				for _, i := range part {
					keys = append(keys, key(int(i)))
				}
				ok, err := cl.cl.BatchExist(ctx, keys)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				for j, i := range part {
					if err == nil && ok[j] {
						present = append(present, i)
					} else {
						absent = append(absent, i)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return present, absent, firstErr
}

// waitPresent waits until every object of want exists again, or deadline,
// and returns those still missing, the time from t0 to the check that
// found the last of them, and the first error of a check ("": none).
// While the master's /api/summary counts fewer objects than want it polls
// that count every 20 ms (O(1) on the master); then it checks the keys
// still missing with existCount every 20 ms. Checking every missing key at
// each poll would put millions of lookups per poll on the master's lock
// while it restores, slowing what is measured. counted is the time from t0
// to the poll that found the count reached (0: not seen).
func (c *cluster) waitPresent(ctx context.Context, want []int32, t0, deadline time.Time) (missing []int32, took, counted time.Duration, firstErr string) {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	missing = want
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if len(missing) == len(want) && time.Until(deadline) > time.Second {
			s, err := c.admin.summary(dctx)
			if err == nil && s.Objects < len(want) {
				select {
				case <-dctx.Done():
				case <-tick.C:
					continue
				}
			}
			if err == nil && counted == 0 {
				counted = time.Since(t0)
			}
		}
		_, absent, err := c.existCount(dctx, missing)
		if err != nil && firstErr == "" {
			firstErr = err.Error()
		}
		missing = absent
		took = time.Since(t0)
		if len(missing) == 0 || dctx.Err() != nil {
			return missing, took, counted, firstErr
		}
		select {
		case <-dctx.Done():
		case <-tick.C:
		}
	}
}

// remountLogWait bounds the wait for the nodes' remount log lines after
// the objects are back.
const remountLogWait = 5 * time.Second

// nodeRemounts is each node's last remount log line since the last call
// ("" for a node that logged none by wait from now: a node logs its
// remount after the master's answer to its last call, which may come after
// the objects were counted).
func (c *cluster) nodeRemounts(wait time.Duration) []string {
	out := make([]string, len(c.nodes))
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := 0
		for i, n := range c.nodes {
			if out[i] == "" {
				out[i] = n.errTail.markedLine(remountMark)
			}
			if out[i] == "" {
				missing++
			}
		}
		if missing == 0 || !time.Now().Before(deadline) {
			return out
		}
		<-tick.C
	}
}

// masterRestore is the serving master's last log line of a restore
// session that ended (of the last node's remount) since the last call.
func (c *cluster) masterRestore() string { return c.master.errTail.markedLine(restoreMark) }

// allIndices is 0..n-1, every loaded key.
func allIndices(n int) []int32 {
	all := make([]int32, n)
	for i := range all {
		all[i] = int32(i)
	}
	return all
}

// listAll lists every key with prefix by pages of ListPage and returns how
// many there were.
func (c *cluster) listAll(ctx context.Context, prefix string) (int, error) {
	n, after := 0, ""
	for {
		keys, next, err := c.ctl.cl.List(ctx, prefix, after, ListPage)
		if err != nil {
			return n, err
		}
		n += len(keys)
		if next == "" {
			return n, nil
		}
		after = next
	}
}
