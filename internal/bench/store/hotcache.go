package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// HotCacheConfig configures RunHotCache.
type HotCacheConfig struct {
	Sizes, Clients []int
	Keys           int     // keys of each size (the Zipf ranks)
	Zipf           float64 // Zipf exponent s (> 1)
	CacheSize      uint64  // each reader's hot cache
	OverwriteRate  float64 // upserts per second of Zipf-drawn keys by a writer during the phases (0 = none)
	Rounds         int
	Duration       time.Duration
	Transport      string // of readers and nodes (tcp: the nodes stand for remote machines)
}

// Validate reports the first invalid field.
func (c HotCacheConfig) Validate() error {
	switch {
	case len(c.Sizes) == 0 || len(c.Clients) == 0:
		return fmt.Errorf("bench store hot cache: no sizes or clients")
	case c.Keys < 2:
		return fmt.Errorf("bench store hot cache: %d keys, want at least 2", c.Keys)
	case c.Zipf <= 1:
		return fmt.Errorf("bench store hot cache: Zipf exponent %g, want > 1", c.Zipf)
	case c.CacheSize == 0:
		return fmt.Errorf("bench store hot cache: cache size 0")
	case c.OverwriteRate < 0 || c.Rounds < 1 || c.Duration <= 0:
		return fmt.Errorf("bench store hot cache: bad overwrite rate, rounds or duration")
	}
	return nil
}

// HotCacheRow is one configuration's Zipf gets with the hot cache off and
// on (median rounds by ops/s).
type HotCacheRow struct {
	Size, Clients int
	Off, On       Row
	HitRatio      float64 // of the median "on" round: hits over gets
	Fills         float64 // of the median "on" round: values taken into the caches, over gets
	Overwrites    int     // upserts the writer made during the median "on" round
	// Gets that found their key mid-overwrite (not found: the master hides
	// a key from an upsert's start to its commit), median rounds; not errors.
	NotFoundOff, NotFoundOn int
}

// HotCacheResult is what RunHotCache measured.
type HotCacheResult struct {
	Config HotCacheConfig
	Rows   []HotCacheRow
}

// RunHotCache measures the client hot cache on a Zipf-distributed get
// workload: a writer puts Keys keys of each size into a pool of a master
// and two storage nodes in this process; then readers (each its own client
// and transfer engine, as engine processes are) get keys drawn from a Zipf
// distribution into registered memory (GetInto), one group with the hot
// cache off and one with it on (CacheSize each), in alternating order
// round by round, after an unmeasured warm-up phase of each. With
// OverwriteRate, a writer upserts Zipf-drawn keys (same size, new values)
// during every phase. Each size gets fresh readers (empty caches).
func RunHotCache(ctx context.Context, c HotCacheConfig) (*HotCacheResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	maxSize, maxClients := slices.Max(c.Sizes), slices.Max(c.Clients)
	segSize := uint64(c.Keys*maxSize)*3/4 + 64<<20 // per node: the key set spread over two, with room
	p, err := startBenchPool(ctx, true, segSize, 1, maxSize, c.Transport, poolSecurity{})
	if err != nil {
		return nil, err
	}
	defer p.close()
	writer := p.kv[0]
	res := &HotCacheResult{Config: c}
	for _, size := range c.Sizes {
		prefix := fmt.Sprintf("hc/%d", size)
		v := make([]byte, size)
		for k := range c.Keys {
			for i := range v {
				v[i] = byte(i*7 + k)
			}
			if err := writer.put(ctx, fmt.Sprintf("%s/%d", prefix, k), v); err != nil {
				return nil, fmt.Errorf("bench store hot cache: put: %w", err)
			}
		}
		off, err := openReaders(ctx, p.srv.Addr(), maxClients, size, c.Transport, store.HotCacheConfig{})
		if err != nil {
			return nil, err
		}
		on, err := openReaders(ctx, p.srv.Addr(), maxClients, size, c.Transport, store.HotCacheConfig{Size: c.CacheSize})
		if err != nil {
			closeReaders(off)
			return nil, err
		}
		for _, n := range c.Clients {
			for _, g := range [][]*mooncakeKV{off[:n], on[:n]} { // warm-up
				_, _, _ = zipfPhase(ctx, g, writer, prefix, size, c, c.Duration)
			}
			var offs, ons []Row
			var hits, fills []float64
			var ows []int
			var nfOff, nfOn []int
			for r := range c.Rounds {
				for _, isOn := range []bool{r%2 == 1, r%2 == 0} {
					if !isOn {
						row, _, miss := zipfPhase(ctx, off[:n], writer, prefix, size, c, c.Duration)
						offs = append(offs, row)
						nfOff = append(nfOff, miss)
						continue
					}
					before := hotTotals(on[:n])
					row, nw, miss := zipfPhase(ctx, on[:n], writer, prefix, size, c, c.Duration)
					after := hotTotals(on[:n])
					ratio, fill := 0.0, 0.0
					if gets := after.gets - before.gets; gets > 0 {
						ratio = float64(after.hits-before.hits) / float64(gets)
						fill = float64(after.fills-before.fills) / float64(gets)
					}
					ons, hits, fills, ows = append(ons, row), append(hits, ratio), append(fills, fill), append(ows, nw)
					nfOn = append(nfOn, miss)
				}
			}
			mi, mo := medianIndex(ons), medianIndex(offs)
			res.Rows = append(res.Rows, HotCacheRow{Size: size, Clients: n, Off: offs[mo], On: ons[mi], HitRatio: hits[mi], Fills: fills[mi],
				Overwrites: ows[mi], NotFoundOff: nfOff[mo], NotFoundOn: nfOn[mi]})
		}
		closeReaders(off)
		closeReaders(on)
		if _, err := writer.cl.RemoveAll(ctx, true); err != nil {
			return nil, fmt.Errorf("bench store hot cache: remove all: %w", err)
		}
	}
	return res, nil
}

// medianIndex is the index of the round with the median ops/s.
func medianIndex(rs []Row) int {
	idx := make([]int, len(rs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch x, y := rs[a].OpsPerSec(), rs[b].OpsPerSec(); {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	return idx[len(idx)/2]
}

type hotTotal struct{ hits, gets, fills uint64 }

func hotTotals(cls []*mooncakeKV) hotTotal {
	var t hotTotal
	for _, c := range cls {
		if st, ok := c.cl.HotCacheStats(); ok {
			t.hits += st.Hits
			t.gets += st.Hits + st.Misses + st.Stale
			t.fills += st.Admitted
		}
	}
	return t
}

// openReaders opens n clients, each with its own transfer engine and a
// registered buffer of size bytes.
func openReaders(ctx context.Context, addr string, n, size int, transport string, hot store.HotCacheConfig) ([]*mooncakeKV, error) {
	var out []*mooncakeKV
	for range n {
		eng, err := transfer.Open(ctx, transfer.Config{Transport: transport})
		if err != nil {
			closeReaders(out)
			return nil, err
		}
		cl, err := store.New(ctx, store.Config{Master: addr, Mover: eng, LocalBufferSize: uint64(2*size + 1<<20), UnmountGrace: 100 * time.Millisecond, HotCache: hot})
		if err != nil {
			eng.Close()
			closeReaders(out)
			return nil, err
		}
		m := &mooncakeKV{cl: cl, eng: eng, buf: make([]byte, size)}
		out = append(out, m)
		if err := cl.RegisterBuffer(m.buf); err != nil {
			closeReaders(out)
			return nil, err
		}
	}
	return out, nil
}

func closeReaders(cls []*mooncakeKV) {
	for _, c := range cls {
		c.close()
	}
}

// zipfPhase runs Zipf-drawn GetInto calls on every reader for d (and the
// writer's upserts at c.OverwriteRate) and returns the row, the number of
// upserts made and, with overwrites, the gets that found their key
// mid-overwrite (not counted as errors).
func zipfPhase(ctx context.Context, cls []*mooncakeKV, writer *mooncakeKV, prefix string, size int, c HotCacheConfig, d time.Duration) (Row, int, int) {
	res := Row{System: SystemInProcess, Op: "get-into-zipf", Size: size, Clients: len(cls)}
	var mu sync.Mutex
	var lats []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	overwrites, notFound := 0, 0
	if c.OverwriteRate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			z := rand.NewZipf(rand.New(rand.NewPCG(99, uint64(start.UnixNano()))), c.Zipf, 1, uint64(c.Keys-1))
			v := make([]byte, size)
			every := time.Duration(float64(time.Second) / c.OverwriteRate)
			t := time.NewTicker(every)
			defer t.Stop()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
				k := z.Uint64()
				for i := range v {
					v[i] = byte(i*7+int(k)) ^ byte(overwrites+1)
				}
				if writer.put(ctx, fmt.Sprintf("%s/%d", prefix, k), v) == nil {
					overwrites++
				}
			}
		}()
	}
	for ci, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			z := rand.NewZipf(rand.New(rand.NewPCG(uint64(ci), uint64(start.UnixNano()))), c.Zipf, 1, uint64(c.Keys-1))
			var local []time.Duration
			ops, errs, nf := 0, 0, 0
			var firstErr error
			for time.Now().Before(deadline) && ctx.Err() == nil {
				key := fmt.Sprintf("%s/%d", prefix, z.Uint64())
				t0 := time.Now()
				n, err := cl.getInto(ctx, key)
				if err == nil && n != size {
					err = fmt.Errorf("got %d bytes, want %d", n, size)
				}
				if err != nil && c.OverwriteRate > 0 && errors.Is(err, store.ErrNotFound) {
					nf++
					continue
				}
				if err != nil {
					errs++
					firstErr = cmpOr(firstErr, err)
					continue
				}
				local = append(local, time.Since(t0))
				ops++
			}
			mu.Lock()
			lats = append(lats, local...)
			res.Ops += ops
			res.Errors += errs
			notFound += nf
			res.FirstErr = cmpOr(res.FirstErr, firstErr)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if len(lats) > 0 {
		slices.Sort(lats)
		res.P50 = lats[len(lats)/2]
		res.P99 = lats[min(len(lats)-1, len(lats)*99/100)]
	}
	return res, overwrites, notFound
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
