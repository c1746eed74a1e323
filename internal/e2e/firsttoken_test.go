package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/proxy"
)

// The first output token travels with the KV: for every protocol our proxy
// speaks (ours, each vLLM variant, SGLang), decode takes prefill's first
// token and computes no prompt token at all, and the output equals a
// colocated engine's token for token, streamed and not, completions and
// chat, greedy and seeded sampling.
func TestFirstTokenFromPrefill(t *testing.T) {
	col := startColocated(t)
	ctx := context.Background()
	for _, proto := range proxy.Protocols {
		t.Run(proto, func(t *testing.T) {
			c := startCluster(t, cluster.Config{Proxy: proxy.Config{Protocol: proto}})
			n := 0
			for i, p := range prompts {
				for _, chat := range []bool{false, true} {
					for _, stream := range []bool{false, true} {
						for _, sampled := range []bool{false, true} {
							// A distinct head per request: decode never hits
							// its own prefix cache, so every prompt arrives
							// whole from prefill.
							g := genReq{chat: chat, prompt: fmt.Sprintf("%d:%v%v%v ", i, chat, stream, sampled) + p, max: 7, stream: stream}
							body := g.body()
							if sampled {
								body["temperature"], body["top_p"], body["seed"] = 0.8, 0.9, 1234+i
							}
							want := send(t, ctx, col.URL, g.path(), body, nil)
							got := send(t, ctx, c.URL, g.path(), body, nil)
							if want.Code != 200 || got.Code != 200 {
								t.Fatalf("prompt %d %+v: colocated %d %s, P/D %d %s", i, g, want.Code, want.Raw, got.Code, got.Raw)
							}
							if len(want.TokenIDs) != 7 || !equalInts(want.TokenIDs, got.TokenIDs) || want.Text != got.Text {
								t.Fatalf("prompt %d %+v sampled %v: P/D %v %q != colocated %v %q", i, g, sampled, got.TokenIDs, got.Text, want.TokenIDs, want.Text)
							}
							if !stream && (got.KV["kv_load"] != "remote" || got.KV["first_token_from_prefill"] != true) {
								t.Fatalf("prompt %d %+v: kv_transfer_params %v", i, g, got.KV)
							}
							n++
						}
					}
				}
			}
			dec := c.Decode[0]
			assertNoLeaks(t, c.Prefill[0], dec)
			s := dec.Engine.Stats()
			if s.PromptTokens != 0 || s.FirstTokensFromConnector != uint64(n) || s.GeneratedTokens != uint64(7*n) {
				t.Fatalf("decode computed %d prompt tokens (want 0), took %d first tokens from prefill (want %d), generated %d", s.PromptTokens, s.FirstTokensFromConnector, n, s.GeneratedTokens)
			}
			if v := metricValue(t, dec.URL, `mooncake_pd_first_token_total{source="prefill"}`); v != float64(n) {
				t.Fatalf("first tokens from prefill in metrics: %v, want %d", v, n)
			}
			if v := metricValue(t, dec.URL, "mooncake_engine_connector_first_tokens_total"); v != float64(n) {
				t.Fatalf("engine's first tokens from the connector: %v, want %d", v, n)
			}
			if v := metricValue(t, dec.URL, "mooncake_engine_prompt_tokens_computed_total"); v != 0 {
				t.Fatalf("decode computed %v prompt tokens", v)
			}
		})
	}
}
