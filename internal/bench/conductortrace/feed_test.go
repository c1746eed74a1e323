package conductortrace

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	benchtrace "github.com/kvcache-go/mooncake/internal/bench/trace"
	"github.com/kvcache-go/mooncake/internal/kvevents/kvleak"
	"github.com/kvcache-go/mooncake/internal/tracesim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, kvleak.IgnoreZMQ()...)
}

// Routing fed by a conductor over ZMQ and HTTP picks as routing fed by the
// in-process index: the same hits, request by request, on the first
// requests of Mooncake's conversation trace (small caches, so evictions
// flow too).
func TestConductorFeedMatchesEmbeddedIndex(t *testing.T) {
	wd, _ := os.Getwd()
	path, err := benchtrace.FindTrace(os.Getenv("MOONCAKE_TRACE"), wd)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("%v (or set MOONCAKE_TRACE)", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := tracesim.ReadAll(f, 150)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tracesim.DefaultRouteConfig()
	cfg.CapacityBlocks = 100
	for _, rt := range []tracesim.Router{tracesim.CacheAware, tracesim.Conductor} {
		emb := cfg
		emb.EventsFed = true
		want, err := tracesim.SimulateRouting(tr.Requests, rt, emb)
		if err != nil {
			t.Fatal(err)
		}
		feed, err := New(cfg.Instances)
		if err != nil {
			t.Fatal(err)
		}
		rem := cfg
		rem.Feed = feed
		got, err := tracesim.SimulateRouting(tr.Requests, rt, rem)
		feed.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got.Hits != want.Hits || got.Served != want.Served || got.MeanTTFT != want.MeanTTFT || want.Hits == 0 {
			t.Fatalf("%s: conductor-fed hits %d ttft %v, embedded %d %v", rt, got.Hits, got.MeanTTFT, want.Hits, want.MeanTTFT)
		}
		if feed.Queries != len(tr.Requests) || feed.Batches == 0 {
			t.Fatalf("%d queries, %d batches", feed.Queries, feed.Batches)
		}
	}
}
