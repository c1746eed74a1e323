package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/chaos"
	"github.com/kvcache-go/mooncake/internal/testbed"
)

// ErrConfig is a bad Config.
var ErrConfig = errors.New("soak: bad configuration")

// Config configures a soak.
type Config struct {
	Binary         string        // the mooncake binary the hosts run (required)
	Duration       time.Duration // how long the load runs
	Interval       time.Duration // one report row per interval (default Duration/10, at least 5s)
	Workers        int           // concurrent completion streams (default 4)
	StoreWriters   int           // concurrent store writers (default 2)
	StoreValue     int           // store value size in bytes (default 64 KiB)
	StorePace      time.Duration // pause between a store writer's rounds (default 20ms)
	Logger         *slog.Logger
	OnInterval     func(Interval) // optional: called as each interval closes
	RequestTimeout time.Duration  // per completion (default 30s); store operations 10s
}

func (c Config) withDefaults() (Config, error) {
	if c.Binary == "" || c.Duration <= 0 {
		return c, fmt.Errorf("%w: need Binary and a positive Duration", ErrConfig)
	}
	if c.Interval == 0 {
		c.Interval = max(c.Duration/10, 5*time.Second)
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.StoreWriters == 0 {
		c.StoreWriters = 2
	}
	if c.StoreValue == 0 {
		c.StoreValue = 64 << 10
	}
	if c.StorePace == 0 {
		c.StorePace = 20 * time.Millisecond
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Interval is one row of the report.
type Interval struct {
	Start, End time.Duration    // since the load began
	Ops        map[string]int   // by op: completion, put, get
	Errors     map[string]int   // "op kind" -> count (kinds of internal/chaos)
	TTFT, TPOT Quantiles        // completions that succeeded
	Put, Get   Quantiles        // store operation latency
	RSS        map[string]int64 // process -> bytes, sampled at the end of the interval
}

// Quantiles are p50 and p99.
type Quantiles struct{ P50, P99 time.Duration }

// Report is the whole soak.
type Report struct {
	Duration  time.Duration
	Subnet    string
	Intervals []Interval
	Total     chaos.Summary
	Examples  []string // one message per error kind
	Leaked    string   // "" or the engines still holding KV blocks after the load
	Verified  int      // acknowledged keys read back after the load
	BadReads  int      // of those, not readable or stale
	// RSSGrowth is each process's RSS at the end over its RSS at the end of
	// the first interval.
	RSSGrowth map[string]float64
}

// Run makes a bed, starts the cluster, runs the load for cfg.Duration and
// reports.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	bed, err := testbed.New(ctx, testbed.Config{Hosts: chaos.Hosts, Binary: cfg.Binary, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	defer bed.Close()
	c, err := chaos.Start(ctx, bed, chaos.Spec{Stores: 3, Prefill: 2, Decode: 2, Segment: "256MiB", ProxyTimeout: cfg.RequestTimeout})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ref, err := bed.Host(5).StartServe(ctx, "both")
	if err != nil {
		return nil, err
	}
	want, err := chaos.Reference(ctx, ref.URL)
	ref.Kill()
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("soak: cluster up", "subnet", bed.Subnet(), "proxy", c.Proxy.URL, "duration", cfg.Duration)

	var rec chaos.Recorder
	loadCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	url := c.Proxy.URL
	load := &chaos.Load{Workers: cfg.Workers, Deadline: cfg.RequestTimeout, URL: func() string { return url }, Want: want, Rec: &rec}
	ledger := &chaos.Ledger{Client: c.Client, Writers: cfg.StoreWriters, Keys: 200, Size: cfg.StoreValue,
		Deadline: 10 * time.Second, Rec: &rec, Pace: cfg.StorePace}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); load.Run(loadCtx) }()
	go func() { defer wg.Done(); ledger.Run(loadCtx) }()

	begin := time.Now()
	rep := &Report{Subnet: bed.Subnet(), RSSGrowth: map[string]float64{}}
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	from := begin
	done := false
	for !done {
		select {
		case <-tick.C:
		case <-loadCtx.Done():
			wg.Wait() // the last requests end within their deadlines
			done = true
		}
		to := time.Now()
		if done && to.Sub(from) < time.Second && len(rep.Intervals) > 0 {
			break // the load's last instant: no row of its own
		}
		iv := interval(rec.Results(), begin, from, to)
		iv.RSS = map[string]int64{}
		for name, p := range c.Procs() {
			if rss, err := p.RSS(); err == nil {
				iv.RSS[name] = rss
			}
		}
		rep.Intervals = append(rep.Intervals, iv)
		if cfg.OnInterval != nil {
			cfg.OnInterval(iv)
		}
		from = to
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep.Duration = time.Since(begin)
	rep.Total = chaos.Summarize(rec.Results(), time.Time{})
	rep.Examples = rep.Total.Messages
	n, bad := ledger.Verify(ctx)
	rep.Verified, rep.BadReads = n, len(bad)
	for _, b := range bad {
		rep.Examples = append(rep.Examples, "verify "+b.Kind+": "+b.Msg)
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	if err := chaos.WaitNoLeak(lctx, c.Engines()); err != nil {
		rep.Leaked = err.Error()
	}
	cancel()
	if len(rep.Intervals) > 1 {
		first, last := rep.Intervals[0].RSS, rep.Intervals[len(rep.Intervals)-1].RSS
		for name, v := range last {
			if f := first[name]; f > 0 {
				rep.RSSGrowth[name] = float64(v) / float64(f)
			}
		}
	}
	return rep, nil
}

// interval summarizes the results that ended in [from, to).
func interval(res []chaos.Result, begin, from, to time.Time) Interval {
	iv := Interval{Start: from.Sub(begin), End: to.Sub(begin), Ops: map[string]int{}, Errors: map[string]int{}}
	var ttft, tpot, put, get []time.Duration
	for _, r := range res {
		if r.End.Before(from) || !r.End.Before(to) {
			continue
		}
		iv.Ops[r.Op]++
		if chaos.Failed(r.Kind) {
			iv.Errors[r.Op+" "+r.Kind]++
			continue
		}
		switch r.Op {
		case "completion":
			ttft = append(ttft, r.TTFT)
			tpot = append(tpot, r.TPOT)
		case "put":
			put = append(put, r.End.Sub(r.Start))
		case "get":
			get = append(get, r.End.Sub(r.Start))
		}
	}
	q := func(ds []time.Duration) Quantiles {
		return Quantiles{P50: chaos.Percentile(ds, 0.5), P99: chaos.Percentile(ds, 0.99)}
	}
	iv.TTFT, iv.TPOT, iv.Put, iv.Get = q(ttft), q(tpot), q(put), q(get)
	return iv
}

// Errors is the total of errors in the report.
func (r *Report) Errors() int {
	n := 0
	for k, v := range r.Total.Kinds {
		if chaos.Failed(k) {
			n += v
		}
	}
	return n + r.BadReads
}

// Processes are the process names of the report, sorted.
func (r *Report) Processes() []string {
	seen := map[string]bool{}
	for _, iv := range r.Intervals {
		for k := range iv.RSS {
			seen[k] = true
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
