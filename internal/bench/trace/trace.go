package trace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvcache-go/mooncake/internal/tracesim"
)

// DefaultTraceRel is the default trace, relative to the repository root.
var DefaultTraceRel = filepath.Join("..", "shared", "traces", "conversation_trace.jsonl")

// ErrNoRequests is returned by Run for a trace without requests.
var ErrNoRequests = errors.New("no requests")

// FindTrace resolves the trace path: flagPath when set, else
// DefaultTraceRel from the repository root found by walking up from dir to
// a go.mod.
func FindTrace(flagPath, dir string) (string, error) {
	if flagPath != "" {
		return flagPath, nil
	}
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			p := filepath.Join(d, DefaultTraceRel)
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("no trace at %s: pass --trace PATH", p)
			}
			return p, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no repository root (go.mod) above %s to find %s: pass --trace PATH", dir, DefaultTraceRel)
		}
		d = parent
	}
}

// ParseCapacities parses "inf,100000,..." into capacities (tracesim.Unlimited
// for inf).
func ParseCapacities(s string) ([]int, error) {
	var caps []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if strings.EqualFold(part, "inf") {
			caps = append(caps, tracesim.Unlimited)
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--capacities: %q is not inf or a positive number of blocks", part)
		}
		caps = append(caps, n)
	}
	return caps, nil
}

// CapLabel is a capacity as printed: "Inf" for tracesim.Unlimited.
func CapLabel(c int) string {
	if c == tracesim.Unlimited {
		return "Inf"
	}
	return strconv.Itoa(c)
}

// Result is every figure of one replay.
type Result struct {
	Requests       int                    // requests replayed
	Blocks         int                    // blocks over all requests
	DistinctBlocks int                    // distinct hash ids
	IdealHits      int                    // hits of an unlimited pool
	IdealHitRate   float64                // IdealHits / Blocks
	Cache          []tracesim.CacheResult // per policy, per capacity (tracesim.Policies order)
	Optimum        []tracesim.CacheResult // Belady's offline optimum per capacity (capacities order)
	Ceiling        []tracesim.CacheResult // the class ceiling per capacity (capacities order)
	Route          []tracesim.RouteResult // per router (tracesim.Routers order), then the events-fed runs
	RouteNames     []string               // the router of each Route entry; "(kv events)" marks an events-fed one
}

// Run replays reqs through every policy at every capacity and through every
// router with cfg (which must be valid). It returns ErrNoRequests for an
// empty trace and the router's error for a configuration it refuses.
func Run(reqs []tracesim.Request, capacities []int, cfg tracesim.RouteConfig) (Result, error) {
	if len(reqs) == 0 {
		return Result{}, ErrNoRequests
	}
	var r Result
	r.Requests = len(reqs)
	r.IdealHits, r.Blocks = tracesim.IdealHits(reqs)
	if r.Blocks > 0 {
		r.IdealHitRate = float64(r.IdealHits) / float64(r.Blocks)
	}
	distinct := make(map[int64]struct{})
	for _, q := range reqs {
		for _, id := range q.HashIDs {
			distinct[id] = struct{}{}
		}
	}
	r.DistinctBlocks = len(distinct)
	for _, p := range tracesim.Policies {
		for _, c := range capacities {
			r.Cache = append(r.Cache, tracesim.SimulateCache(reqs, p, c))
		}
	}
	for _, c := range capacities {
		r.Optimum = append(r.Optimum, tracesim.SimulateBelady(reqs, c))
		r.Ceiling = append(r.Ceiling, tracesim.SimulateClassCeiling(reqs, c))
	}
	type routeRun struct {
		rt     tracesim.Router
		events bool // the router's view fed by the instances' KV events
	}
	var runs []routeRun
	for _, rt := range tracesim.Routers {
		runs = append(runs, routeRun{rt: rt})
	}
	runs = append(runs, routeRun{tracesim.CacheAware, true}, routeRun{tracesim.Conductor, true})
	for _, run := range runs {
		rcfg := cfg
		rcfg.EventsFed = run.events
		rr, err := tracesim.SimulateRouting(reqs, run.rt, rcfg)
		if err != nil {
			return Result{}, err
		}
		name := run.rt.String()
		if run.events {
			name += " (kv events)"
		}
		r.Route = append(r.Route, rr)
		r.RouteNames = append(r.RouteNames, name)
	}
	return r, nil
}

// GapShare is the share of the gap between LRU and the optimum that a
// policy closes: (hit - lru) / (opt - lru), 0 when there is no gap.
func GapShare(hit, lru, opt float64) float64 {
	if opt-lru <= 1e-12 {
		return 0
	}
	return (hit - lru) / (opt - lru)
}

// Ratio is a/b, 0 when b is 0.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
