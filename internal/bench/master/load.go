package master

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// kv is what the get/put load needs of one client connection: the store's
// client or a Redis connection.
type kv interface {
	get(ctx context.Context, key string) ([]byte, error)
	put(ctx context.Context, key string, value []byte) error
}

var (
	_ kv = (*client)(nil)
	_ kv = (*respConn)(nil)
)

// client is one store client of the bench with its transfer engine (nil
// when the engine is shared and closed by its owner).
type client struct {
	cl  *store.Client
	eng *transfer.Engine
}

// openClient opens a store client of the master at addr on eng, or on an
// engine of its own when eng is nil, with the given deadline of a master
// call (0: the store's default).
func openClient(ctx context.Context, addr, transport string, eng *transfer.Engine, bufSize uint64, rpcTimeout time.Duration) (*client, error) {
	c := &client{}
	mover := eng
	if mover == nil {
		var err error
		if c.eng, err = transfer.Open(ctx, transfer.Config{Transport: transport}); err != nil {
			return nil, err
		}
		mover = c.eng
	}
	var err error
	c.cl, err = store.New(ctx, store.Config{Master: addr, Mover: mover, LocalBufferSize: bufSize, UnmountGrace: 100 * time.Millisecond, RPCTimeout: rpcTimeout})
	if err != nil {
		if c.eng != nil {
			c.eng.Close()
		}
		return nil, err
	}
	return c, nil
}

func (c *client) close() {
	c.cl.Close()
	if c.eng != nil {
		c.eng.Close()
	}
}

func (c *client) get(ctx context.Context, key string) ([]byte, error) { return c.cl.Get(ctx, key) }

// put upserts: the get/put load writes the same keys again and again
// (never the keys it reads, which hold read leases).
func (c *client) put(ctx context.Context, key string, v []byte) error {
	return c.cl.PutWith(ctx, key, v, store.PutOptions{Upsert: true})
}

func (r *respConn) get(_ context.Context, key string) ([]byte, error) {
	v, err := r.do([]byte("GET"), []byte(key))
	if err == nil && v == nil {
		err = fmt.Errorf("redis: %s: not found", key)
	}
	return v, err
}

func (r *respConn) put(_ context.Context, key string, v []byte) error {
	_, err := r.do([]byte("SET"), []byte(key), v)
	return err
}

// OpsFigures are one get/put load's figures: ops/s of gets and puts
// together, latency quantiles per kind (durations in ns in JSON).
type OpsFigures struct {
	System    string        `json:"system"` // "mooncake" or "redis"
	Clients   int           `json:"clients"`
	Ops       int           `json:"ops"`
	Errors    int           `json:"errors"`
	FirstErr  string        `json:"first_error,omitempty"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	OpsPerSec float64       `json:"ops_per_sec"`
	GetP50    time.Duration `json:"get_p50_ns"`
	GetP99    time.Duration `json:"get_p99_ns"`
	PutP50    time.Duration `json:"put_p50_ns"`
	PutP99    time.Duration `json:"put_p99_ns"`
}

// opsRun is the raw outcome of a get/put load, mergeable across
// processes (workers send theirs as JSON).
type opsRun struct {
	Ops      int           `json:"ops"`
	Errors   int           `json:"errors"`
	FirstErr string        `json:"first_error,omitempty"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Get      Hist          `json:"get"`
	Put      Hist          `json:"put"`
}

func (o *opsRun) merge(p opsRun) {
	o.Ops += p.Ops
	o.Errors += p.Errors
	if o.FirstErr == "" {
		o.FirstErr = p.FirstErr
	}
	o.Elapsed = max(o.Elapsed, p.Elapsed)
	o.Get.Merge(p.Get)
	o.Put.Merge(p.Put)
}

func (o opsRun) figures(system string, clients int) OpsFigures {
	f := OpsFigures{System: system, Clients: clients, Ops: o.Ops, Errors: o.Errors, FirstErr: o.FirstErr, Elapsed: o.Elapsed,
		GetP50: o.Get.Quantile(0.50), GetP99: o.Get.Quantile(0.99), PutP50: o.Put.Quantile(0.50), PutP99: o.Put.Quantile(0.99)}
	if o.Elapsed > 0 {
		f.OpsPerSec = float64(o.Ops) / o.Elapsed.Seconds()
	}
	return f
}

// opsKey is client ci's k-th key of kind ("get" or "put") under prefix.
func opsKey(prefix, kind string, ci, k int) string {
	return fmt.Sprintf("%s/%s/%03d/%03d", prefix, kind, ci, k)
}

// pinPutter is a kv that can store hard-pinned values (the store).
type pinPutter interface {
	putPinned(ctx context.Context, key string, value []byte) error
}

func (c *client) putPinned(ctx context.Context, key string, v []byte) error {
	return c.cl.PutWith(ctx, key, v, store.PutOptions{Upsert: true, HardPin: true})
}

// preloadOps writes every client's get keys (keys per client) so that
// the load's gets find them; hard-pinned if pin and the kv can.
func preloadOps[K kv](ctx context.Context, cls []K, prefix string, keys int, pin bool) error {
	v := opsValue()
	var wg sync.WaitGroup
	errs := make([]error, len(cls))
	for ci, c := range cls {
		wg.Go(func() {
			for k := range keys {
				put := c.put
				if p, ok := any(c).(pinPutter); ok && pin {
					put = p.putPinned
				}
				if err := put(ctx, opsKey(prefix, "get", ci, k), v); err != nil {
					errs[ci] = fmt.Errorf("preload: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func opsValue() []byte {
	v := make([]byte, OpsSize)
	for i := range v {
		v[i] = byte(i * 13)
	}
	return v
}

// opsLoad runs the get/put load on cls until stop is closed or d passed
// (d 0: until stop only): each client alternates an upsert of one of its
// put keys and a get of a random one of its get keys (keys each, written
// by preloadOps), each call timed.
func opsLoad[K kv](ctx context.Context, cls []K, prefix string, keys int, d time.Duration, stop <-chan struct{}) opsRun {
	var (
		mu  sync.Mutex
		res opsRun
		wg  sync.WaitGroup
	)
	start := time.Now()
	var deadline time.Time
	if d > 0 {
		deadline = start.Add(d)
	}
	for ci, c := range cls {
		wg.Go(func() {
			v := opsValue()
			r := rand.New(rand.NewPCG(uint64(ci), 11))
			var local opsRun
			for i := 0; ; i++ {
				if ctx.Err() != nil || (!deadline.IsZero() && !time.Now().Before(deadline)) {
					break
				}
				select {
				case <-stop:
					goto done
				default:
				}
				t0 := time.Now()
				var err error
				if i%2 == 0 {
					err = c.put(ctx, opsKey(prefix, "put", ci, (i/2)%keys), v)
					if err == nil {
						local.Put.Add(time.Since(t0))
					}
				} else {
					var got []byte
					got, err = c.get(ctx, opsKey(prefix, "get", ci, r.IntN(keys)))
					if err == nil && len(got) != OpsSize {
						err = fmt.Errorf("get: %d bytes, want %d", len(got), OpsSize)
					}
					if err == nil {
						local.Get.Add(time.Since(t0))
					}
				}
				if err != nil {
					local.Errors++
					if local.FirstErr == "" {
						local.FirstErr = err.Error()
					}
					continue
				}
				local.Ops++
			}
		done:
			mu.Lock()
			res.merge(local)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// backgroundOps runs opsLoad until the returned function is called, which
// returns its outcome.
func backgroundOps[K kv](ctx context.Context, cls []K, prefix string, keys int) func() opsRun {
	stop := make(chan struct{})
	out := make(chan opsRun, 1)
	go func() { out <- opsLoad(ctx, cls, prefix, keys, 0, stop) }()
	return func() opsRun {
		close(stop)
		return <-out
	}
}
