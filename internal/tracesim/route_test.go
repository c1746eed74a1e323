package tracesim

import (
	"errors"
	"math"
	"testing"
)

// simpleConfig: 1 ms per uncached token, no fixed or quadratic cost, and
// transfers of 1 s per 8 blocks (8*512 tokens * 1000 B / 4.096 MB/s).
func simpleConfig(instances int) RouteConfig {
	return RouteConfig{
		Instances:              instances,
		CapacityBlocks:         Unlimited,
		Cost:                   CostModel{PerToken: 1e-3},
		KVBytesPerToken:        1000,
		BandwidthBytesPerSec:   4.096e6,
		BalanceThresholdBlocks: 100,
		SLOSeconds:             30,
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestCostModel(t *testing.T) {
	m := CostModel{Fixed: 1, PerToken: 0.5, PerTokenPair: 0.25}
	for _, tc := range []struct {
		in, prefix int64
		want       float64
	}{
		{4, 0, 1 + 2 + 0.25*8},     // n=4: 4*0 + 16/2
		{4, 2, 1 + 1 + 0.25*(4+2)}, // n=2, p=2: 2*2 + 4/2
		{4, 4, 1},                  // everything cached
		{4, 9, 1},                  // prefix clamped to the input
		{4, -3, 1 + 2 + 0.25*8},    // negative prefix clamped to 0
		{0, 0, 1},
	} {
		if got := m.Prefill(tc.in, tc.prefix); !near(got, tc.want) {
			t.Errorf("Prefill(%d,%d) = %v, want %v", tc.in, tc.prefix, got, tc.want)
		}
	}
	if got := simpleConfig(1).TransferSeconds(8); !near(got, 1) {
		t.Fatalf("transfer of 8 blocks %v", got)
	}
}

// TestConductorPick: a 4096-token (8-block) prompt fully cached on
// instance 1 and not at all on instance 0 (idle).
func TestConductorPick(t *testing.T) {
	const in = 8 * BlockTokens // 4.096 s to compute from scratch
	for _, tc := range []struct {
		name      string
		threshold int
		queue1    float64
		want      Choice
	}{
		{"holder's short queue wins", 100, 1, Choice{Instance: 1, Prefix: 8, Holder: 1, Estimate: 1}},
		{"holder's long queue loses", 100, 5, Choice{Instance: 0, Prefix: 0, Holder: 1, Estimate: 4.096}},
		// Threshold 0: instance 0 can pull the 8 blocks in 1 s instead.
		{"pull beats the long queue", 0, 5, Choice{Instance: 0, Prefix: 8, Pulled: 8, Holder: 1, Estimate: 1}},
		{"pull loses to a short queue", 0, 0.5, Choice{Instance: 1, Prefix: 8, Holder: 1, Estimate: 0.5}},
		// 8 blocks missing is not more than a threshold of 8: no pull.
		{"threshold not exceeded", 8, 5, Choice{Instance: 0, Prefix: 0, Holder: 1, Estimate: 4.096}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := simpleConfig(2)
			c.BalanceThresholdBlocks = tc.threshold
			got := c.Pick(Conductor, in, []InstanceView{{Queue: 0, Prefix: 0}, {Queue: tc.queue1, Prefix: 8}}, 0)
			if got.Instance != tc.want.Instance || got.Prefix != tc.want.Prefix || got.Pulled != tc.want.Pulled ||
				got.Holder != tc.want.Holder || !near(got.Estimate, tc.want.Estimate) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestOtherRoutersPick(t *testing.T) {
	c := simpleConfig(3)
	views := []InstanceView{{Queue: 2, Prefix: 1}, {Queue: 1, Prefix: 3}, {Queue: 0.5, Prefix: 3}}
	for _, tc := range []struct {
		r    Router
		next int
		want int
	}{
		{RoundRobin, 0, 0}, {RoundRobin, 4, 1}, {RoundRobin, 8, 2},
		{LeastLoaded, 0, 2},
		{CacheAware, 0, 2}, // longest prefix 3 on 1 and 2; 2 has the shorter queue
	} {
		got := c.Pick(tc.r, 4*BlockTokens, views, tc.next)
		if got.Instance != tc.want || got.Pulled != 0 || got.Prefix != views[tc.want].Prefix {
			t.Errorf("%v next=%d: %+v, want instance %d", tc.r, tc.next, got, tc.want)
		}
		wantEst := views[tc.want].Queue + c.Cost.Prefill(4*BlockTokens, int64(views[tc.want].Prefix)*BlockTokens)
		if !near(got.Estimate, wantEst) {
			t.Errorf("%v: estimate %v, want %v", tc.r, got.Estimate, wantEst)
		}
	}
}

// Three requests on two instances, 1 ms per uncached token:
// A [1,2] 1024 tokens at 0 ms, B [1,2] 1024 tokens at 0 ms, C [3] 512 at 100 ms.
func TestSimulateRoutingHand(t *testing.T) {
	tr := []Request{
		{Timestamp: 0, InputLength: 1024, HashIDs: []int64{1, 2}},
		{Timestamp: 100, InputLength: 512, HashIDs: []int64{3}},
		{Timestamp: 0, InputLength: 1024, HashIDs: []int64{1, 2}}, // out of order on purpose
	}
	for _, tc := range []struct {
		r          Router
		hits       int
		mean, p90  float64
		withinSLO1 int // within an SLO of 1.2 s
	}{
		// A->0 (1.024), B->1 (1.024, nothing cached there), C->0 (0.924 queued + 0.512).
		{RoundRobin, 0, (1.024 + 1.024 + 1.436) / 3, 1.436, 2},
		// A->0, B->1 (idle), C: both queues 0.924, tie -> 0.
		{LeastLoaded, 0, (1.024 + 1.024 + 1.436) / 3, 1.436, 2},
		// A->0, B->0 (prefix 2: 1.024 queued + 0), C->1 (idle).
		{CacheAware, 2, (1.024 + 1.024 + 0.512) / 3, 1.024, 3},
		// B: 1.024 on both, tie -> 0; then as cache-aware.
		{Conductor, 2, (1.024 + 1.024 + 0.512) / 3, 1.024, 3},
	} {
		t.Run(tc.r.String(), func(t *testing.T) {
			c := simpleConfig(2)
			c.SLOSeconds = 1.2
			got, err := SimulateRouting(tr, tc.r, c)
			if err != nil {
				t.Fatal(err)
			}
			if got.Requests != 3 || got.Served != 3 || got.Blocks != 5 || got.Hits != tc.hits || got.Pulled != 0 ||
				!near(got.MeanTTFT, tc.mean) || !near(got.P90TTFT, tc.p90) || got.WithinSLO != tc.withinSLO1 ||
				!near(got.MeanIsolated, (1.024+1.024+0.512)/3) {
				t.Fatalf("got %+v", got)
			}
			// Early rejection refuses what would miss the SLO and keeps the rest.
			c.Reject = true
			rej, err := SimulateRouting(tr, tc.r, c)
			if err != nil {
				t.Fatal(err)
			}
			if rej.Rejected != 3-tc.withinSLO1 || rej.Served != tc.withinSLO1 || rej.WithinSLO != tc.withinSLO1 ||
				!near(rej.SLOFraction(), float64(tc.withinSLO1)/3) {
				t.Fatalf("with rejection: %+v", rej)
			}
		})
	}
}

// TestConductorReplicates: the conductor pulls a hot prefix to an idle
// instance, which keeps it, so the next request finds it there locally.
func TestConductorReplicates(t *testing.T) {
	ids := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	tr := []Request{
		{Timestamp: 0, InputLength: 8 * BlockTokens, HashIDs: ids},    // -> 0, 4.096 s
		{Timestamp: 0, InputLength: 8 * BlockTokens, HashIDs: ids},    // 0: 4.096 queued; 1: pull 1 s -> 1
		{Timestamp: 2000, InputLength: 8 * BlockTokens, HashIDs: ids}, // 0: 2.096 queued; 1: local, 0 queued -> 1, 0 s
	}
	c := simpleConfig(2)
	c.BalanceThresholdBlocks = 0
	got, err := SimulateRouting(tr, Conductor, c)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hits != 16 || got.Pulled != 8 || !near(got.MeanTTFT, (4.096+1+0)/3) || !near(got.P90TTFT, 4.096) {
		t.Fatalf("got %+v", got)
	}
	// Without pulls the second request waits for instance 0.
	c.BalanceThresholdBlocks = 100
	got, err = SimulateRouting(tr, Conductor, c)
	if err != nil {
		t.Fatal(err)
	}
	if got.Pulled != 0 || !near(got.MeanTTFT, (4.096+4.096+2.096)/3) {
		t.Fatalf("no pulls: %+v", got)
	}
}

func TestRouteConfigValidate(t *testing.T) {
	if err := DefaultRouteConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*RouteConfig){
		"instances": func(c *RouteConfig) { c.Instances = 0 },
		"capacity":  func(c *RouteConfig) { c.CapacityBlocks = -1 },
		"cost":      func(c *RouteConfig) { c.Cost.PerToken = -1 },
		"cost nan":  func(c *RouteConfig) { c.Cost.Fixed = math.NaN() },
		"kv bytes":  func(c *RouteConfig) { c.KVBytesPerToken = 0 },
		"bandwidth": func(c *RouteConfig) { c.BandwidthBytesPerSec = math.Inf(1) },
		"threshold": func(c *RouteConfig) { c.BalanceThresholdBlocks = -1 },
		"slo":       func(c *RouteConfig) { c.SLOSeconds = 0 },
	} {
		c := DefaultRouteConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := SimulateRouting(sixRequests, Conductor, c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: SimulateRouting accepted it: %v", name, err)
		}
	}
}

func TestNearestRank(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{1, 0}, {3, 2}, {10, 8}, {11, 9}, {100, 89}} {
		if got := nearestRank(tc.n, 0.9); got != tc.want {
			t.Errorf("nearestRank(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// TestCacheAwareHotSpot cross-checks the two simulations: when every
// request starts with the same block (as in the conversation trace), the
// first instance to cache it wins every later longest-prefix comparison,
// so cache-aware routing degenerates to one instance whose hits are those
// of a single LRU pool of the same size.
func TestCacheAwareHotSpot(t *testing.T) {
	tr := synthTrace(2000, 11)
	for i := range tr {
		tr[i].HashIDs = append([]int64{-1}, tr[i].HashIDs...)
	}
	c := simpleConfig(4)
	c.CapacityBlocks = 300
	got, err := SimulateRouting(tr, CacheAware, c)
	if err != nil {
		t.Fatal(err)
	}
	want := SimulateCache(tr, LRU, 300)
	if got.Hits != want.Hits || got.Blocks != want.Blocks {
		t.Fatalf("cache-aware %d/%d, one LRU pool %d/%d", got.Hits, got.Blocks, want.Hits, want.Blocks)
	}
	cd, err := SimulateRouting(tr, Conductor, c)
	if err != nil {
		t.Fatal(err)
	}
	if cd.MeanTTFT >= got.MeanTTFT {
		t.Fatalf("conductor mean TTFT %.3f not below cache-aware's %.3f", cd.MeanTTFT, got.MeanTTFT)
	}
}

func BenchmarkSimulateCache(b *testing.B) {
	tr := synthTrace(5000, 3)
	_, blocks := IdealHits(tr)
	for _, p := range Policies {
		b.Run(p.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				SimulateCache(tr, p, 500)
			}
			b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}

func BenchmarkSimulateRouting(b *testing.B) {
	tr := synthTrace(5000, 3)
	c := DefaultRouteConfig()
	c.CapacityBlocks = 500
	for _, r := range Routers {
		b.Run(r.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := SimulateRouting(tr, r, c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(tr))*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
		})
	}
}

// A router fed by the instances' KV events (through the wire codec and
// the index) sees exactly what its own bookkeeping sees: same choices,
// same hit rate.
func TestEventsFedRoutingEqualsBookkeeping(t *testing.T) {
	reqs := synthTrace(3000, 7)
	for _, rt := range []Router{CacheAware, Conductor} {
		cfg := simpleConfig(4)
		cfg.CapacityBlocks = 40 // small caches: evictions must travel as events too
		own, err := SimulateRouting(reqs, rt, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.EventsFed = true
		ev, err := SimulateRouting(reqs, rt, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if own != ev || own.Hits == 0 {
			t.Fatalf("%v: events-fed %+v != bookkeeping %+v", rt, ev, own)
		}
	}
}
