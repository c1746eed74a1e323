// Command bench_store_go is the Go side of python/bench_store.py: the Go
// store client's BatchPut and BatchGetInto of --batch values of --size
// bytes against a running master, timed per batch. It prints one JSON line
// {"put_gbps": best, "get_gbps": best, "batches": n}.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

func main() {
	master := flag.String("master", "127.0.0.1:50051", "master address")
	batch := flag.Int("batch", 32, "values per batch")
	size := flag.Int("size", 1<<20, "value size in bytes")
	iters := flag.Int("iters", 10, "batches to time")
	transport := flag.String("transport", "auto", "transfer transport")
	prefix := flag.String("prefix", "bench-go", "key prefix")
	perKey := flag.Bool("per-key", false, "PutFrom/GetInto per key from registered buffers, 8 at a time (what the binding does below cgo) instead of BatchPut/BatchGetInto")
	flag.Parse()
	if err := run(*master, *transport, *prefix, *batch, *size, *iters, *perKey); err != nil {
		fmt.Fprintln(os.Stderr, "bench_store_go:", err)
		os.Exit(1)
	}
}

func run(master, transport, prefix string, batch, size, iters int, perKey bool) error {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	eng, err := transfer.Open(ctx, transfer.Config{LocalHostname: "127.0.0.1", Transport: transport, Logger: log})
	if err != nil {
		return err
	}
	defer eng.Close()
	c, err := store.New(ctx, store.Config{Master: master, Mover: eng, LocalBufferSize: 64 << 20, Logger: log})
	if err != nil {
		return err
	}
	defer c.Close()
	src := make([]byte, batch*size)
	for i := range src {
		src[i] = byte(i * 31)
	}
	dst := make([]byte, batch*size)
	if err := c.RegisterBuffer(dst); err != nil {
		return err
	}
	defer c.UnregisterBuffer(dst)
	if perKey {
		if err := c.RegisterBuffer(src); err != nil {
			return err
		}
		defer c.UnregisterBuffer(src)
	}
	values, dsts := make([][]byte, batch), make([][]byte, batch)
	for i := range batch {
		values[i] = src[i*size : (i+1)*size : (i+1)*size]
		dsts[i] = dst[i*size : (i+1)*size : (i+1)*size]
	}
	var bestPut, bestGet time.Duration
	for it := range iters + 1 { // the first batch warms up
		keys := make([]string, batch)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s/%d/%d", prefix, it, i)
		}
		t0 := time.Now()
		var perrs []error
		if perKey {
			perrs = make([]error, batch)
			parallel(batch, func(i int) { perrs[i] = c.PutFrom(ctx, keys[i], values[i], store.PutOptions{}) })
		} else {
			perrs = c.BatchPut(ctx, keys, values, store.PutOptions{})
		}
		for i, err := range perrs {
			if err != nil {
				return fmt.Errorf("put %s: %w", keys[i], err)
			}
		}
		tp := time.Since(t0)
		t0 = time.Now()
		var ns []int
		var errs []error
		if perKey {
			ns, errs = make([]int, batch), make([]error, batch)
			parallel(batch, func(i int) { ns[i], errs[i] = c.GetInto(ctx, keys[i], dsts[i]) })
		} else {
			ns, errs = c.BatchGetInto(ctx, keys, dsts)
		}
		tg := time.Since(t0)
		for i, err := range errs {
			if err != nil || ns[i] != size {
				return fmt.Errorf("get %s: %d %v", keys[i], ns[i], err)
			}
		}
		if it == 0 {
			if string(dst[:64]) != string(src[:64]) {
				return fmt.Errorf("data mismatch")
			}
		} else {
			if bestPut == 0 || tp < bestPut {
				bestPut = tp
			}
			if bestGet == 0 || tg < bestGet {
				bestGet = tg
			}
		}
		// removed untimed; a reader's lease may still hold for a moment
		for _, err := range c.BatchRemove(ctx, keys, true) {
			_ = err
		}
	}
	total := float64(batch * size)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"put_gbps": total / bestPut.Seconds() / 1e9, "get_gbps": total / bestGet.Seconds() / 1e9, "batches": iters})
}

// parallel runs f(i) for i in [0, n), 8 at a time (the binding's batch width).
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}
