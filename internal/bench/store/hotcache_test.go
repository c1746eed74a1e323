package store

import (
	"testing"
	"time"
)

// TestRunHotCache runs a short Zipf phase with the hot cache off and on:
// both groups get every key they ask for, the cache serves most gets of a
// key set that fits, and the writer's overwrites run during the phases.
func TestRunHotCache(t *testing.T) {
	cfg := HotCacheConfig{Sizes: []int{4 << 10}, Clients: []int{2}, Keys: 16, Zipf: 1.2, CacheSize: 1 << 20, Rounds: 1,
		Duration: 150 * time.Millisecond, Transport: "tcp"}
	res, err := RunHotCache(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 {
		t.Fatalf("%d rows", len(res.Rows))
	}
	r := res.Rows[0]
	if r.Off.Ops == 0 || r.On.Ops == 0 || r.Off.Errors != 0 || r.On.Errors != 0 || r.On.P50 == 0 || r.Off.P99 == 0 {
		t.Fatalf("off %+v on %+v", r.Off, r.On)
	}
	if r.HitRatio < 0.5 || r.Fills > 0.5 {
		t.Fatalf("hit ratio %.3f, fills %.3f: the key set fits the cache", r.HitRatio, r.Fills)
	}
	cfg.OverwriteRate = 500
	res, err = RunHotCache(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Rows[0]; r.Overwrites == 0 || r.On.Ops == 0 {
		t.Fatalf("with overwrites: %+v", r)
	}
	for _, bad := range []HotCacheConfig{{}, {Sizes: []int{1}, Clients: []int{1}, Keys: 1}, {Sizes: []int{1}, Clients: []int{1}, Keys: 2, Zipf: 1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
