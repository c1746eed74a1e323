package trace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcache-go/mooncake/internal/tracesim"
)

// sixLineTrace: the same six requests as tracesim's hand-worked test
// (ideal 9 hits of 16 blocks; capacity 4: LRU 6, LFU 7, LengthAware 8, TailFirst 8,
// Retention 8: it drops the partial tails 3, 4, 5 and 6 and keeps the chain 1-2).
var sixLineTrace = func() string {
	b, err := os.ReadFile("testdata/six_requests.jsonl")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func TestRun(t *testing.T) {
	tr, err := tracesim.ReadAll(strings.NewReader(sixLineTrace), 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tracesim.DefaultRouteConfig()
	cfg.Instances = 2
	r, err := Run(tr.Requests, []int{tracesim.Unlimited, 4}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 6 || r.IdealHits != 9 || r.Blocks != 16 || r.IdealHitRate != 9.0/16 || r.DistinctBlocks != 7 {
		t.Fatalf("result %+v", r)
	}
	// Every router, then cache-aware and conductor fed by KV events.
	if len(r.Cache) != 2*len(tracesim.Policies) || len(r.Route) != len(tracesim.Routers)+2 || len(r.RouteNames) != len(r.Route) {
		t.Fatalf("%d cache rows, %d route rows, %d names", len(r.Cache), len(r.Route), len(r.RouteNames))
	}
	byName := map[string]tracesim.RouteResult{}
	for i, rr := range r.Route {
		byName[r.RouteNames[i]] = rr
	}
	for _, rt := range []tracesim.Router{tracesim.CacheAware, tracesim.Conductor} {
		book, ev := byName[rt.String()], byName[rt.String()+" (kv events)"]
		if ev.Requests == 0 || ev.HitRate() != book.HitRate() {
			t.Errorf("%s: events-fed hit rate %v, bookkeeping %v", rt, ev.HitRate(), book.HitRate())
		}
	}
	want := map[tracesim.Policy]int{tracesim.Policies[0]: 6, tracesim.Policies[1]: 7, tracesim.Policies[2]: 8, tracesim.TailFirst: 8, tracesim.Retention: 8}
	for _, c := range r.Cache {
		if c.Capacity == 4 && c.Hits != want[c.Policy] {
			t.Errorf("%s at 4 blocks: %d hits, want %d", c.Policy, c.Hits, want[c.Policy])
		}
	}
	// Belady per capacity: the ideal when unlimited, at least every
	// policy's hits at 4 blocks.
	if len(r.Optimum) != 2 || r.Optimum[0].Hits != 9 || r.Optimum[1].Capacity != 4 {
		t.Fatalf("optimum %+v", r.Optimum)
	}
	for _, c := range r.Cache {
		if c.Capacity == 4 && c.Hits > r.Optimum[1].Hits {
			t.Errorf("%s: %d hits above the optimum %d", c.Policy, c.Hits, r.Optimum[1].Hits)
		}
	}
	// The class ceiling per capacity: the ideal when unlimited.
	if len(r.Ceiling) != 2 || r.Ceiling[0].Hits != 9 || r.Ceiling[1].Capacity != 4 || r.Ceiling[1].Policy != tracesim.ClassCeiling {
		t.Fatalf("ceiling %+v", r.Ceiling)
	}
	if g := GapShare(0.3, 0.2, 0.4); g < 0.4999 || g > 0.5001 || GapShare(0.3, 0.4, 0.4) != 0 {
		t.Fatalf("GapShare %v", g)
	}
	if _, err := Run(nil, []int{4}, cfg); !errors.Is(err, ErrNoRequests) {
		t.Fatalf("empty trace: %v", err)
	}
}

func TestParseCapacities(t *testing.T) {
	got, err := ParseCapacities("inf, 4,1000")
	if err != nil || len(got) != 3 || got[0] != tracesim.Unlimited || got[1] != 4 || got[2] != 1000 {
		t.Fatalf("%v %v", got, err)
	}
	for _, in := range []string{"inf,0", "x", "-3", ""} {
		if _, err := ParseCapacities(in); err == nil || !strings.Contains(err.Error(), "--capacities") {
			t.Errorf("%q: %v", in, err)
		}
	}
	if CapLabel(tracesim.Unlimited) != "Inf" || CapLabel(7) != "7" {
		t.Fatal("CapLabel")
	}
}

func TestFindTrace(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "main")
	sub := filepath.Join(repo, "internal", "x")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := FindTrace("given.jsonl", sub); err != nil || p != "given.jsonl" {
		t.Fatalf("flag: %q %v", p, err)
	}
	if _, err := FindTrace("", sub); err == nil || !strings.Contains(err.Error(), "--trace") {
		t.Fatalf("no go.mod: %v", err)
	}
	if err := os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := FindTrace("", sub); err == nil || !strings.Contains(err.Error(), "--trace") {
		t.Fatalf("no trace: %v", err)
	}
	want := filepath.Join(root, "shared", "traces", "conversation_trace.jsonl")
	if err := os.MkdirAll(filepath.Dir(want), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(want, []byte(sixLineTrace), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := FindTrace("", sub); err != nil || p != want {
		t.Fatalf("found %q %v, want %q", p, err, want)
	}
}
