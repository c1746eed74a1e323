package master

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/transfer"
)

// The lines a worker process prints, in order.
const (
	workerFirstOp = "worker first-op" // after its first successful get (of probeKey)
	workerReady   = "worker ready"    // its clients are open and their keys written
	workerResult  = "worker result "  // followed by its opsRun as JSON
)

// WorkerConfig is one client process of the clients phase (`mooncake
// bench master --worker`).
type WorkerConfig struct {
	Master    string // the master's gRPC address
	Transport string
	ID        int           // its key prefix (workerPrefix)
	Clients   int           // store clients, on one transfer engine
	Duration  time.Duration // of its get/put load
	Probe     bool          // exit after the first get
	Pin       bool          // write its get keys hard-pinned
}

// RunWorker is a worker process: it opens a transfer engine and a store
// client, gets probeKey and prints workerFirstOp (the bench times the
// process from its start to that line); a probe stops there. Otherwise it
// opens the other clients on the same engine, writes their get keys,
// prints workerReady, waits for a line on in, runs the get/put load for
// Duration and prints workerResult with its figures.
func RunWorker(ctx context.Context, cfg WorkerConfig, in io.Reader, out io.Writer) error {
	eng, err := transfer.Open(ctx, transfer.Config{Transport: cfg.Transport})
	if err != nil {
		return err
	}
	defer eng.Close()
	var cls []*client
	defer func() {
		var wg sync.WaitGroup
		for _, c := range cls {
			wg.Go(c.close)
		}
		wg.Wait()
	}()
	first, err := openClient(ctx, cfg.Master, cfg.Transport, eng, 1<<20, 0)
	if err != nil {
		return err
	}
	cls = append(cls, first)
	if _, err := first.get(ctx, probeKey); err != nil {
		return fmt.Errorf("worker: first get: %w", err)
	}
	fmt.Fprintln(out, workerFirstOp)
	if cfg.Probe {
		return nil
	}
	for len(cls) < cfg.Clients {
		c, err := openClient(ctx, cfg.Master, cfg.Transport, eng, 1<<20, 0)
		if err != nil {
			return err
		}
		cls = append(cls, c)
	}
	prefix := workerPrefix(cfg.ID)
	if err := preloadOps(ctx, cls, prefix, WorkerKeys, cfg.Pin); err != nil {
		return err
	}
	fmt.Fprintln(out, workerReady)
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return fmt.Errorf("worker: waiting for go: %w", err)
	}
	res := opsLoad(ctx, cls, prefix, WorkerKeys, cfg.Duration, nil)
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s%s\n", workerResult, b)
	return nil
}

// parseWorkerResult decodes a worker's result line.
func parseWorkerResult(line string) (opsRun, error) {
	var o opsRun
	rest, ok := strings.CutPrefix(line, workerResult)
	if !ok {
		return o, errors.New("want a result line, got " + line)
	}
	return o, json.Unmarshal([]byte(rest), &o)
}
