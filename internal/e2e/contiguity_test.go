package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/kvcache-go/mooncake/internal/cluster"
)

// TestLongPromptFewWriteRequests: a fresh long prompt gets one run of
// consecutive block ids on both sides, so the push needs one write request
// per layer; after other requests cycled the small KV pool, a new long
// prompt still needs only a few (one per run per layer), not one per block
// (14 here for 2 layers; 116 with the former free-queue allocation).
// Whole-request transfer; TestLayerwiseWriteRequests is the streamed one.
func TestLongPromptFewWriteRequests(t *testing.T) {
	c := startCluster(t, cluster.Config{Instance: cluster.InstanceConfig{NumBlocks: 96, PDWholeRequest: true}})
	ctx := context.Background()
	layers := float64(len(tinyModel(t).Layers))
	writes := func(prompt string) float64 {
		t.Helper()
		got := complete(t, ctx, c.URL, prompt, 4, false)
		if got.Code != 200 || got.KV["kv_load"] != "remote" {
			t.Fatalf("%d %v %s", got.Code, got.KV, got.Raw)
		}
		n, _ := got.KV["kv_write_requests"].(float64)
		return n
	}
	// 1,001 tokens with BOS: 63 blocks per layer.
	if n := writes(strings.Repeat("0123456789", 100)); n != layers {
		t.Fatalf("fresh pool: kv_write_requests = %v, want %v (one per layer)", n, layers)
	}
	writes(strings.Repeat("a first prompt fills blocks ", 25))
	writes(strings.Repeat("and a second one, ", 40))
	n := writes(strings.Repeat("9876543210", 100))
	t.Logf("cycled pool: %v write requests", n)
	if n < layers || n > 10*layers {
		t.Fatalf("cycled pool: kv_write_requests = %v for 63 blocks x %v layers, want at most %v", n, layers, 10*layers)
	}
	assertNoLeaks(t, c.Prefill[0], c.Decode[0])
}

// TestLayerwiseWriteRequests: streamed layer by layer, a fresh 1,001-token
// prompt computed in two chunks (the step budget is 512 tokens) moves with
// one write request per layer per chunk (one per layer for what was
// computed before the pull arrived), and the answer says it streamed.
func TestLayerwiseWriteRequests(t *testing.T) {
	c := startCluster(t, cluster.Config{Instance: cluster.InstanceConfig{NumBlocks: 96}})
	layers := float64(len(tinyModel(t).Layers))
	got := complete(t, context.Background(), c.URL, strings.Repeat("0123456789", 100), 4, false)
	if got.Code != 200 || got.KV["kv_load"] != "remote" || got.KV["kv_layerwise"] != true {
		t.Fatalf("%d %v %s", got.Code, got.KV, got.Raw)
	}
	if n, _ := got.KV["kv_write_requests"].(float64); n < layers || n > 2*layers {
		t.Fatalf("kv_write_requests = %v, want %v..%v (one per layer per chunk)", n, layers, 2*layers)
	}
	if _, ok := got.KV["kv_write_tail_ms"].(float64); !ok {
		t.Fatalf("no kv_write_tail_ms in %v", got.KV)
	}
	assertNoLeaks(t, c.Prefill[0], c.Decode[0])
}
