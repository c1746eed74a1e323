package store

import (
	"context"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/grant"
	"slices"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// benchPool is a master with two storage nodes and some clients, in process.
type benchPool struct {
	srv     *masterserver.Server
	cfg     masterserver.ServerConfig
	nodes   []*storenode.Node
	kv      []*mooncakeKV
	cls     []*store.Client
	closers []func()
}

func startBenchPool(ctx context.Context, durable bool, segSize uint64, clients, maxSize int, transport string, sec poolSecurity) (*benchPool, error) {
	p := &benchPool{cfg: masterserver.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond, Core: master.Config{Durable: durable},
		Tenants: sec.tenants, Secret: sec.secret, TLS: sec.srvTLS, NoLocalSocket: sec.noLocal, Grants: sec.grants}}
	if sec.transport != "" {
		transport = sec.transport
	}
	var verifier *grant.Verifier
	if sec.grants != nil {
		verifier = grant.NewVerifier(sec.grants, nil)
	}
	var err error
	if p.srv, err = masterserver.Start(p.cfg); err != nil {
		return nil, err
	}
	for range 2 {
		n, err := storenode.Start(ctx, storenode.Config{Master: p.srv.Addr(), Secret: sec.secret, TLS: sec.cliTLS, SegmentSize: segSize, PingInterval: 50 * time.Millisecond,
			Engine: transfer.Config{Transport: transport, Grants: verifier}, UnmountGrace: 100 * time.Millisecond})
		if err != nil {
			p.close()
			return nil, err
		}
		p.nodes = append(p.nodes, n)
	}
	for range clients {
		eng, err := transfer.Open(ctx, transfer.Config{Transport: transport})
		if err != nil {
			p.close()
			return nil, err
		}
		cl, err := store.New(ctx, store.Config{Master: p.srv.Addr(), Mover: eng, LocalBufferSize: uint64(2*maxSize + 1<<20), UnmountGrace: 100 * time.Millisecond,
			Token: sec.token, TLS: sec.cliTLS})
		if err != nil {
			eng.Close()
			p.close()
			return nil, err
		}
		p.closers = append(p.closers, func() { cl.Close(); eng.Close() })
		buf := make([]byte, maxSize)
		if err := cl.RegisterBuffer(buf); err != nil {
			p.close()
			return nil, err
		}
		p.cls = append(p.cls, cl)
		p.kv = append(p.kv, &mooncakeKV{cl: cl, buf: buf})
	}
	return p, nil
}

func (p *benchPool) close() {
	for _, c := range p.closers {
		c()
	}
	for _, n := range p.nodes {
		n.Close()
	}
	if p.srv != nil {
		p.srv.Close()
	}
}

// DurableConfig configures RunDurable.
type DurableConfig struct {
	Sizes, Clients []int
	Rounds         int
	Duration       time.Duration
	Objects        int    // objects in the pool for the restart measurement
	Transport      string // auto, tcp, shm
}

// DurableRow is one put configuration with durable metadata off and on
// (median rounds).
type DurableRow struct {
	Size, Clients int
	Off, On       Row
}

// DurableResult is what RunDurable measured.
type DurableResult struct {
	SegmentSize uint64
	Put         []DurableRow
	RestoreWant int           // objects in the pool before the master restart
	RestoreGot  int           // objects the restarted master knew when the wait ended
	RestoreTook time.Duration // from the old master's close to RestoreGot
}

// RunDurable measures what durable metadata costs and what it buys: put
// throughput with durable metadata on vs off (two pools in this process,
// rounds alternated, median), the time a restarted master takes to learn a
// pool's objects back from the nodes (the disk tier: RunDisk).
func RunDurable(ctx context.Context, c DurableConfig) (*DurableResult, error) {
	const segSize = 256 << 20
	res := &DurableResult{SegmentSize: segSize}
	maxClients, maxSize := slices.Max(c.Clients), slices.Max(c.Sizes)
	pools := map[bool]*benchPool{}
	for _, durable := range []bool{false, true} {
		p, err := startBenchPool(ctx, durable, segSize, maxClients, maxSize, c.Transport, poolSecurity{})
		if err != nil {
			return nil, err
		}
		defer p.close()
		pools[durable] = p
	}
	for _, size := range c.Sizes {
		for _, n := range c.Clients {
			per := max(1, int(2*segSize/4)/size/n)
			rows := map[bool][]Row{}
			for r := range c.Rounds {
				for _, durable := range []bool{r%2 == 1, r%2 == 0} { // alternate which goes first
					prefix := fmt.Sprintf("d%v/%d/%d", durable, size, n)
					rows[durable] = append(rows[durable], runPhase(ctx, SystemInProcess, pools[durable].kv[:n], "put", size, per, prefix, c.Duration))
				}
			}
			res.Put = append(res.Put, DurableRow{Size: size, Clients: n, Off: medianRow(rows[false]), On: medianRow(rows[true])})
		}
	}
	if err := measureRestore(ctx, pools[true], c.Objects, res); err != nil {
		return nil, err
	}
	return res, nil
}

// measureRestore fills the durable pool with 4 KiB values, restarts its
// master on the same address and times until it knows them all again.
func measureRestore(ctx context.Context, p *benchPool, objects int, res *DurableResult) error {
	if _, err := p.cls[0].RemoveAll(ctx, true); err != nil {
		return err
	}
	v := make([]byte, 4096)
	keys := make([]string, 0, 64)
	vals := make([][]byte, 0, 64)
	for i := 0; i < objects; i += 64 {
		keys, vals = keys[:0], vals[:0]
		for j := i; j < min(objects, i+64); j++ {
			keys, vals = append(keys, fmt.Sprint("restore/", j)), append(vals, v)
		}
		for _, err := range p.cls[0].BatchPut(ctx, keys, vals, store.PutOptions{}) {
			if err != nil {
				return fmt.Errorf("fill: %w", err)
			}
		}
	}
	want := p.srv.Core().Stats().Objects
	addr := p.srv.Addr()
	p.srv.Close()
	killed := time.Now()
	cfg := p.cfg
	cfg.Addr = addr
	var err error
	for time.Since(killed) < 10*time.Second {
		if p.srv, err = masterserver.Start(cfg); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond) // the port is being released
	}
	if err != nil {
		return err
	}
	for p.srv.Core().Stats().Objects < want && time.Since(killed) < 30*time.Second {
		time.Sleep(time.Millisecond) // polling interval
	}
	res.RestoreWant, res.RestoreGot, res.RestoreTook = want, p.srv.Core().Stats().Objects, time.Since(killed)
	return nil
}

// medianRow is the round with the median GB/s.
func medianRow(rs []Row) Row {
	slices.SortFunc(rs, func(a, b Row) int {
		switch {
		case a.GBps() < b.GBps():
			return -1
		case a.GBps() > b.GBps():
			return 1
		}
		return 0
	})
	return rs[len(rs)/2]
}
