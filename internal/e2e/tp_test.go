package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/model"
)

// TestTPPairs: for every prefill TP p and decode TP q in {1, 2, 4} (model
// tiny-tp, 4 KV heads; three prefill and three decode engines, paired
// directly with the mooncake contract's kv_transfer_params), the
// disaggregated output equals the colocated TP 1 engine's token for token,
// decode pulled the whole prompt (each of its ranks got its heads from the
// prefill ranks holding them) and took prefill's first token, the write
// request count is as planned, and no engine leaks a block.
func TestTPPairs(t *testing.T) {
	m, err := model.NewBuiltin("tiny-tp", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := func(cfg cluster.InstanceConfig) *cluster.Instance {
		t.Helper()
		cfg.Model = m
		in, err := cluster.StartInstance(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close() })
		return in
	}
	col := start(cluster.InstanceConfig{})
	tps := []int{1, 2, 4}
	var pre, dec []*cluster.Instance
	for _, tp := range tps {
		pre = append(pre, start(cluster.InstanceConfig{Role: "producer", TP: tp}))
		// No prefix cache on decode: every pull moves the whole prompt.
		dec = append(dec, start(cluster.InstanceConfig{Role: "consumer", TP: tp, DisablePrefixCaching: true}))
	}
	tpPrompts := []string{prompts[1], prompts[3]} // 3 and 9 blocks with BOS
	layers := m.Config.NumHiddenLayers
	for i, p := range tpPrompts {
		want := complete(t, ctx, col.URL, p, 8, false)
		if want.Code != 200 || len(want.TokenIDs) != 8 {
			t.Fatalf("colocated: %d %s", want.Code, want.Raw)
		}
		for pi, ptp := range tps {
			for di, dtp := range tps {
				tid := fmt.Sprintf("xfer-tp-%d-%d-%d", i, ptp, dtp)
				if pc := completeKV(t, ctx, pre[pi].URL, p, 1, false, map[string]any{"do_remote_decode": true, "transfer_id": tid}); pc.Code != 200 {
					t.Fatalf("prefill tp %d: %s", ptp, pc.Raw)
				}
				got := completeKV(t, ctx, dec[di].URL, p, 8, i == 1, map[string]any{"do_remote_prefill": true, "transfer_id": tid,
					"remote_bootstrap_addr": pre[pi].BootstrapAddr(), "remote_engine_id": pre[pi].Conn.EngineID()})
				if got.Code != 200 || !equalInts(got.TokenIDs, want.TokenIDs) {
					t.Fatalf("prompt %d, tp %d -> %d: %d %v, colocated tp 1 %v (%s)", i, ptp, dtp, got.Code, got.TokenIDs, want.TokenIDs, got.Raw)
				}
				if i == 1 {
					continue // streamed: the params are not in the SSE chunks parsed
				}
				// One request per layer: each rank's run of blocks is one
				// extent for equal TP, every block's head range of every
				// overlapping rank pair otherwise.
				wantReqs := layers
				if got.KV["kv_load"] != "remote" || got.KV["first_token_from_prefill"] != true || got.KV["kv_write_requests"] != float64(wantReqs) {
					t.Fatalf("prompt %d, tp %d -> %d: kv params %v, want a remote load of %d write requests with prefill's first token", i, ptp, dtp, got.KV, wantReqs)
				}
			}
		}
	}
	for di := range dec {
		if n := dec[di].Conn.Stats().PullsOK; n != uint64(len(tps)*len(tpPrompts)) {
			t.Fatalf("decode tp %d: %d pulls ok, want %d", tps[di], n, len(tps)*len(tpPrompts))
		}
	}
	assertNoLeaks(t, append(pre, dec...)...)
}

// TestClusterTP: `mooncake up --prefill-tp 4 --decode-tp 2` (cluster
// PrefillTP, DecodeTP) serves through the proxy the colocated output.
func TestClusterTP(t *testing.T) {
	m, err := model.NewBuiltin("tiny-tp", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	col, err := cluster.StartInstance(ctx, cluster.InstanceConfig{Model: m})
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	uctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c, err := cluster.Up(uctx, cluster.Config{Model: m, PrefillTP: 4, DecodeTP: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Prefill[0].Engine.Config().TP != 4 || c.Decode[0].Engine.Config().TP != 2 {
		t.Fatalf("engines run tp %d and %d", c.Prefill[0].Engine.Config().TP, c.Decode[0].Engine.Config().TP)
	}
	want := complete(t, ctx, col.URL, prompts[2], 8, false)
	got := complete(t, ctx, c.URL, prompts[2], 8, false)
	if got.Code != 200 || !equalInts(got.TokenIDs, want.TokenIDs) || got.KV["kv_load"] != "remote" {
		t.Fatalf("proxy %d %v %v, colocated %v", got.Code, got.TokenIDs, got.KV, want.TokenIDs)
	}
	assertNoLeaks(t, c.Prefill[0], c.Decode[0])
}
