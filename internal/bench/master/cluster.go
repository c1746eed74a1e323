package master

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// cluster is the master and storage node processes of one run, and the
// bench's store clients.
type cluster struct {
	bin, transport string
	grpc, http     string // the master's addresses (kept across a restart)
	master         *proc
	nodes          []*proc
	admin          *admin
	cls            []*client // loaders; the first OpsClients also run the get/put load
	ctl            *client   // lists, counts, removes
}

// startCluster starts `mooncake master` (durable metadata, :0 ports on
// 127.0.0.1), nodes `mooncake store` processes with segSize bytes each,
// and clients store clients plus the control client (whose master calls
// have ctlRPCTimeout, 0: the store's default).
func startCluster(ctx context.Context, bin, transport string, nodes int, segSize uint64, clients int, ctlRPCTimeout time.Duration) (c *cluster, err error) {
	c = &cluster{bin: bin, transport: transport}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if err := c.startMaster(ctx, "0", "0"); err != nil {
		return c, err
	}
	for range nodes {
		n, _, err := startProc(ctx, bin, "store node mounted", false, "store", "--master", c.grpc,
			"--segment-size", strconv.FormatUint(segSize, 10), "--transport", transport,
			"--http-port", "-1", "--unmount-grace", "100ms")
		if err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, n)
	}
	for range clients {
		cl, err := openClient(ctx, c.grpc, transport, nil, 8<<20, 0)
		if err != nil {
			return c, err
		}
		c.cls = append(c.cls, cl)
	}
	c.ctl, err = openClient(ctx, c.grpc, transport, nil, 8<<20, ctlRPCTimeout)
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
	c.grpc, c.http = fieldOf(line, "grpc"), fieldOf(line, "http")
	if c.grpc == "" || c.http == "" {
		return fmt.Errorf("master: no grpc= or http= in %q", line)
	}
	c.admin = newAdmin(c.http)
	return nil
}

// killMaster SIGKILLs the master and starts a new one on the same ports.
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
// master.
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
	if c.master != nil {
		c.master.stop()
	}
}

// opsClients are the clients of the get/put load.
func (c *cluster) opsClients() []*client { return c.cls[:OpsClients] }

// existCount checks keys idx (key(i)) with BatchExist from every client in
// parallel and returns the indices present and absent. Calls that fail
// count their keys absent; the first error is returned with the counts.
func (c *cluster) existCount(ctx context.Context, idx []int32) (present, absent []int32, err error) {
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
		next     int
	)
	for _, cl := range c.cls {
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
