package store

import (
	"context"
	"fmt"
	"sync"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// batchParallel bounds the goroutines a batch call uses.
const batchParallel = 8

func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, batchParallel)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// BatchPut stores values[i] under keys[i] and returns one error per key
// (nil on success).
func (c *Client) BatchPut(ctx context.Context, keys []string, values [][]byte, o PutOptions) []error {
	errs := make([]error, len(keys))
	if len(keys) != len(values) {
		for i := range errs {
			errs[i] = fmt.Errorf("store: %w: %d keys, %d values", ErrInvalid, len(keys), len(values))
		}
		return errs
	}
	parallel(len(keys), func(i int) { errs[i] = c.PutWith(ctx, keys[i], values[i], o) })
	return errs
}

// BatchGet returns the value and error of each key.
func (c *Client) BatchGet(ctx context.Context, keys []string) ([][]byte, []error) {
	vals := make([][]byte, len(keys))
	errs := make([]error, len(keys))
	parallel(len(keys), func(i int) { vals[i], errs[i] = c.Get(ctx, keys[i]) })
	return vals, errs
}

// BatchGetInto reads each key into the matching registered buffer and
// returns the lengths and errors.
func (c *Client) BatchGetInto(ctx context.Context, keys []string, dsts [][]byte) ([]int, []error) {
	ns := make([]int, len(keys))
	errs := make([]error, len(keys))
	parallel(len(keys), func(i int) { ns[i], errs[i] = c.GetInto(ctx, keys[i], dsts[i]) })
	return ns, errs
}

// BatchExist reports, in order, whether each key exists (one master call).
func (c *Client) BatchExist(ctx context.Context, keys []string) ([]bool, error) {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	r, err := c.rpc.BatchExist(rctx, &pb.BatchKeysRequest{Keys: keys})
	if err != nil {
		return nil, fmt.Errorf("store: batch exist: master rpc: %w", err)
	}
	out := make([]bool, len(keys))
	for i, e := range r.Results {
		if i < len(out) {
			out[i] = e.Exists
		}
	}
	return out, nil
}

// BatchRemove removes each key (one master call) and returns one error per key.
func (c *Client) BatchRemove(ctx context.Context, keys []string, force bool) []error {
	errs := make([]error, len(keys))
	req := &pb.BatchRemoveRequest{}
	for _, k := range keys {
		req.Removes = append(req.Removes, &pb.RemoveRequest{Key: k, Force: force})
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	r, err := c.rpc.BatchRemove(rctx, req)
	for i := range errs {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("store: batch remove: master rpc: %w", err)
		case i < len(r.Results):
			errs[i] = statusErr(r.Results[i])
		}
	}
	return errs
}
