package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
	"github.com/spf13/cobra"
)

// newBenchStoreDurableCmd measures what durable metadata costs and what it
// buys: put throughput with --durable-metadata on vs off (two pools in this
// process, rounds alternated, median), and the time a restarted master takes
// to learn a pool's objects back from the nodes. (A separate command until
// the store benchmark moves to internal/bench/store.)
func newBenchStoreDurableCmd() *cobra.Command {
	var (
		sizesFlag, clientsFlag, transport string
		rounds, objects                   int
		duration                          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "store-durable",
		Short: "Store put throughput with durable metadata on vs off, and master restart recovery time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var sizes, clients []int
			for _, s := range strings.Split(sizesFlag, ",") {
				n, err := parseSize(s)
				if err != nil || n == 0 {
					return &ExitError{Code: 2, Err: fmt.Errorf("--sizes: bad size %q", s)}
				}
				sizes = append(sizes, int(n))
			}
			for _, s := range strings.Split(clientsFlag, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 1 || n > 64 {
					return &ExitError{Code: 2, Err: fmt.Errorf("--clients: bad count %q", s)}
				}
				clients = append(clients, n)
			}
			return runBenchStoreDurable(cmd.Context(), cmd.OutOrStdout(), sizes, clients, rounds, duration, objects, transport)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizesFlag, "sizes", "4KiB,64KiB,1MiB", "value sizes")
	f.StringVar(&clientsFlag, "clients", "1,4", "concurrent clients")
	f.IntVar(&rounds, "rounds", 3, "rounds per phase, alternating on and off (median reported)")
	f.DurationVar(&duration, "duration", 500*time.Millisecond, "length of one phase")
	f.IntVar(&objects, "objects", 20000, "objects in the pool for the restart recovery measurement")
	f.StringVar(&transport, "transport", "auto", "transfer transport: auto, tcp, shm")
	return cmd
}

// benchPool is a master with two storage nodes and some clients, in process.
type benchPool struct {
	srv     *master.Server
	cfg     master.ServerConfig
	nodes   []*storenode.Node
	kv      []kvClient
	cls     []*store.Client
	closers []func()
}

func startBenchPool(ctx context.Context, durable bool, segSize uint64, clients, maxSize int, transport string) (*benchPool, error) {
	p := &benchPool{cfg: master.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond, Core: master.Config{Durable: durable}}}
	var err error
	if p.srv, err = master.Start(p.cfg); err != nil {
		return nil, err
	}
	for range 2 {
		n, err := storenode.Start(ctx, storenode.Config{Master: p.srv.Addr(), SegmentSize: segSize, PingInterval: 50 * time.Millisecond,
			Engine: transfer.Config{Transport: transport}, UnmountGrace: 100 * time.Millisecond})
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
		cl, err := store.New(ctx, store.Config{Master: p.srv.Addr(), Mover: eng, LocalBufferSize: uint64(2*maxSize + 1<<20), UnmountGrace: 100 * time.Millisecond})
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

func runBenchStoreDurable(ctx context.Context, out io.Writer, sizes, clients []int, rounds int, d time.Duration, objects int, transport string) error {
	const segSize = 256 << 20
	maxClients, maxSize := slices.Max(clients), slices.Max(sizes)
	pools := map[bool]*benchPool{}
	for _, durable := range []bool{false, true} {
		p, err := startBenchPool(ctx, durable, segSize, maxClients, maxSize, transport)
		if err != nil {
			return err
		}
		defer p.close()
		pools[durable] = p
	}
	fmt.Fprintf(out, "put (upsert of a key set filling a quarter of a 2 x %s pool), %d rounds x %v alternating, median\n", formatSize(segSize), rounds, d)
	fmt.Fprintf(out, "%-8s %-7s %-12s %-12s %-8s %-10s %-10s\n", "size", "clients", "off GB/s", "on GB/s", "on/off", "off p50", "on p50")
	for _, size := range sizes {
		for _, n := range clients {
			per := max(1, int(2*segSize/4)/size/n)
			res := map[bool][]benchResult{}
			for r := range rounds {
				for _, durable := range []bool{r%2 == 1, r%2 == 0} { // alternate which goes first
					prefix := fmt.Sprintf("d%v/%d/%d", durable, size, n)
					res[durable] = append(res[durable], runPhase(ctx, pools[durable].kv[:n], "put", size, per, prefix, d))
				}
			}
			off, on := median(res[false]), median(res[true])
			if on.errs+off.errs > 0 {
				fmt.Fprintf(out, "  errors: off %d (%v) on %d (%v)\n", off.errs, off.firstErr, on.errs, on.firstErr)
			}
			fmt.Fprintf(out, "%-8s %-7d %-12.3f %-12.3f %-8.2f %-10s %-10s\n", formatSize(uint64(size)), n, off.gbps(), on.gbps(),
				on.gbps()/off.gbps(), fmtDur(off.p50), fmtDur(on.p50))
		}
	}
	// Recovery: a durable pool of `objects` 4 KiB values, master restarted.
	p := pools[true]
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
		if p.srv, err = master.Start(cfg); err == nil {
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
	got := p.srv.Core().Stats().Objects
	took := time.Since(killed)
	fmt.Fprintf(out, "master restart: %d of %d objects (2 x %s segments scanned) back in %v (nodes ping every 50ms)\n", got, want, formatSize(segSize), took.Round(time.Millisecond))
	return benchDiskTier(ctx, out, maxClients, rounds, d, transport)
}

// benchDiskTier offloads 1 MiB objects to a node's disk tier and compares
// gets served from it with the disk's own sequential read of the same
// files (os.ReadFile), measured in the same run.
func benchDiskTier(ctx context.Context, out io.Writer, clients, rounds int, d time.Duration, transport string) error {
	dir, err := os.MkdirTemp("", "mooncake-bench-disk-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := master.Start(master.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond,
		Core: master.Config{Durable: true, HighWatermark: 1, EvictionRatio: 0.25}})
	if err != nil {
		return err
	}
	defer srv.Close()
	n, err := storenode.Start(ctx, storenode.Config{Master: srv.Addr(), SegmentSize: 64 << 20, PingInterval: 20 * time.Millisecond,
		Engine: transfer.Config{Transport: transport}, UnmountGrace: 100 * time.Millisecond,
		RootFSDir: dir, EnableOffload: true, OffloadOnEvict: true, DiskCapacity: 1 << 30})
	if err != nil {
		return err
	}
	defer n.Close()
	var cls []*store.Client
	for range clients {
		eng, err := transfer.Open(ctx, transfer.Config{Transport: transport})
		if err != nil {
			return err
		}
		defer eng.Close()
		cl, err := store.New(ctx, store.Config{Master: srv.Addr(), Mover: eng, LocalBufferSize: 4 << 20, UnmountGrace: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		defer cl.Close()
		cls = append(cls, cl)
	}
	const size, objects = 1 << 20, 48
	v := make([]byte, size)
	for i := range v {
		v[i] = byte(i * 31)
	}
	for i := range objects {
		if err := cls[0].Put(ctx, fmt.Sprint("disk/", i), v); err != nil {
			return fmt.Errorf("disk tier fill: %w", err)
		}
	}
	core := srv.Core()
	for range 8 { // evict to disk until the segment is nearly empty
		core.Evict()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			busy := false
			for _, r := range core.Tombstones() {
				busy = busy || r.Offload
			}
			if !busy {
				break
			}
		}
	}
	var keys []string
	for i := range objects {
		if info, err := core.Query(fmt.Sprint("disk/", i)); err == nil && len(info.Replicas) == 0 && len(info.Disk) == 1 {
			keys = append(keys, info.Key)
		}
	}
	if len(keys) == 0 {
		return fmt.Errorf("disk tier: nothing was offloaded")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.obj"))
	seqRead := func() float64 { // the disk's own sequential read of the same files
		start, total := time.Now(), 0
		for time.Since(start) < d {
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					return 0
				}
				total += len(b)
			}
		}
		return float64(total) / time.Since(start).Seconds() / 1e9
	}
	getFromDisk := func(nc int) float64 {
		var mu sync.Mutex
		total := 0
		start := time.Now()
		var wg sync.WaitGroup
		for c := range nc {
			wg.Go(func() {
				got := 0
				for i := c; time.Since(start) < d; i++ {
					b, err := cls[c].Get(ctx, keys[i%len(keys)])
					if err != nil {
						continue
					}
					got += len(b)
				}
				mu.Lock()
				total += got
				mu.Unlock()
			})
		}
		wg.Wait()
		return float64(total) / time.Since(start).Seconds() / 1e9
	}
	fmt.Fprintf(out, "disk tier: %d x 1 MiB objects offloaded to %s (page cache warm), %d rounds x %v, median\n", len(keys), dir, rounds, d)
	fmt.Fprintf(out, "%-8s %-16s %-18s %-8s\n", "clients", "get from disk", "disk seq. read", "ratio")
	for _, nc := range []int{1, clients} {
		var gets, seqs []float64
		for range rounds {
			gets = append(gets, getFromDisk(nc))
			seqs = append(seqs, seqRead())
		}
		slices.Sort(gets)
		slices.Sort(seqs)
		g, sq := gets[len(gets)/2], seqs[len(seqs)/2]
		fmt.Fprintf(out, "%-8d %-16s %-18s %-8.2f\n", nc, fmt.Sprintf("%.3f GB/s", g), fmt.Sprintf("%.3f GB/s", sq), g/sq)
		if nc == clients {
			break
		}
	}
	return nil
}

func median(rs []benchResult) benchResult {
	slices.SortFunc(rs, func(a, b benchResult) int {
		switch {
		case a.gbps() < b.gbps():
			return -1
		case a.gbps() > b.gbps():
			return 1
		}
		return 0
	})
	return rs[len(rs)/2]
}
