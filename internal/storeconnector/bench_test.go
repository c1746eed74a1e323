package storeconnector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/engine"
)

// BenchmarkTTFT measures the time to first token of a 1,023-token prompt
// (tiny model, 63 full blocks) on an engine whose local prefix cache is
// off: "cold" computes the whole prompt, "store-hit" loads 63 blocks from
// the store (saved by another engine) and computes the last 15 tokens.
// The ratio cold/store-hit is the speedup of prefix reuse through the store.
// "store-hit-layerwise" loads the same blocks layer by layer during the
// step that computes the 15 tokens (Config.Layerwise).
func BenchmarkTTFT(b *testing.B) {
	c := newCluster(b)
	p := prompt(1023, 11)
	a := startEngine(b, storeClient(b, c), nil, func(ec *engine.Config) { ec.MaxNumBatchedTokens = 1024 })
	a.generate(b, "a", p, 1)
	a.flush(b)
	noCache := func(ec *engine.Config) { ec.DisablePrefixCaching = true; ec.MaxNumBatchedTokens = 1024 }
	for _, tc := range []struct {
		name string
		n    *node
	}{
		{"cold", startEngine(b, nil, nil, noCache)},
		{"store-hit", startEngine(b, storeClient(b, c), nil, noCache)},
		{"store-hit-layerwise", startEngine(b, storeClient(b, c), layerwise, noCache)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				s, err := tc.n.eng.Submit(engine.Request{ID: fmt.Sprint(tc.name, i), Prompt: p,
					Params: engine.SamplingParams{MaxTokens: 1, IgnoreEOS: true}})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				out, _, err := s.Collect(ctx)
				cancel()
				if err != nil || len(out) != 1 {
					b.Fatalf("%v %v", out, err)
				}
			}
			if tc.n.conn != nil && tc.n.conn.Stats().LoadedTokens == 0 {
				b.Fatal("store-hit loaded nothing")
			}
		})
	}
}
