package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/kvevents/kvleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, kvleak.IgnoreZMQ()...)
}

// prompts of several lengths (the byte tokenizer: one token per byte), some
// not a multiple of the block size, one shorter than a block.
var prompts = []string{
	"Hi",
	"The quick brown fox jumps over the lazy dog.",
	strings.Repeat("Mooncake moves KV caches between prefill and decode. ", 4),
	strings.Repeat("abcdefghijklmnop", 8), // exactly 8 blocks of 16 (plus BOS)
}

func startColocated(t *testing.T) *cluster.Instance {
	t.Helper()
	in, err := cluster.StartInstance(context.Background(), cluster.InstanceConfig{Model: tinyModel(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

func startCluster(t *testing.T, cfg cluster.Config) *cluster.Cluster {
	t.Helper()
	cfg.Model = tinyModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cluster.Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDisaggregatedEqualsColocated(t *testing.T) {
	col := startColocated(t)
	c := startCluster(t, cluster.Config{})
	ctx := context.Background()
	for i, p := range prompts {
		stream := i%2 == 1
		want := complete(t, ctx, col.URL, p, 12, false)
		got := complete(t, ctx, c.URL, p, 12, stream)
		if want.Code != 200 || got.Code != 200 {
			t.Fatalf("prompt %d: colocated %d %s, proxy %d %s", i, want.Code, want.Raw, got.Code, got.Raw)
		}
		if len(want.TokenIDs) != 12 || !equalInts(want.TokenIDs, got.TokenIDs) || want.Text != got.Text {
			t.Fatalf("prompt %d (stream %v): disaggregated %v %q != colocated %v %q", i, stream, got.TokenIDs, got.Text, want.TokenIDs, want.Text)
		}
		if !stream && got.KV["kv_load"] != "remote" {
			t.Fatalf("prompt %d: kv_load %v, want remote (params %v)", i, got.KV["kv_load"], got.KV)
		}
	}
	dec, pre := c.Decode[0], c.Prefill[0]
	if n := dec.Conn.Stats().PullsOK; n != uint64(len(prompts)) {
		t.Fatalf("decode pulls ok = %d, want %d", n, len(prompts))
	}
	if v := metricValue(t, dec.URL, "mooncake_engine_external_tokens_total"); v == 0 {
		t.Fatal("decode computed every prompt itself: no external tokens")
	}
	assertNoLeaks(t, pre, dec)
	if s := pre.Conn.Stats(); s.FreedDone != uint64(len(prompts)) {
		t.Fatalf("prefill freed %+v, want %d done", s, len(prompts))
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Role "both": each engine can prefill for others and decode from others.
func TestRoleBoth(t *testing.T) {
	col := startColocated(t)
	ctx := context.Background()
	var insts []*cluster.Instance
	for i := 0; i < 2; i++ {
		in, err := cluster.StartInstance(ctx, cluster.InstanceConfig{Model: tinyModel(t), Role: "both"})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		insts = append(insts, in)
	}
	p := "both roles in one engine"
	want := complete(t, ctx, col.URL, p, 6, false)
	for i, pre := range insts {
		dec := insts[1-i]
		tid := "xfer-both-" + string(rune('a'+i))
		if pc := completeKV(t, ctx, pre.URL, p, 1, false, map[string]any{"do_remote_decode": true, "transfer_id": tid}); pc.Code != 200 {
			t.Fatal(pc.Raw)
		}
		got := completeKV(t, ctx, dec.URL, p, 6, false, map[string]any{"do_remote_prefill": true, "transfer_id": tid,
			"remote_bootstrap_addr": pre.BootstrapAddr(), "remote_engine_id": pre.Conn.EngineID()})
		if got.KV["kv_load"] != "remote" || !equalInts(got.TokenIDs, want.TokenIDs) {
			t.Fatalf("%d: %s", i, got.Raw)
		}
	}
	assertNoLeaks(t, insts...)
}

// Malformed remote-prefill params fail the request with a clear error and
// the engine keeps serving.
func TestMalformedRemoteParams(t *testing.T) {
	ctx := context.Background()
	dec, err := cluster.StartInstance(ctx, cluster.InstanceConfig{Model: tinyModel(t), Role: "consumer"})
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	got := completeKV(t, ctx, dec.URL, "hello there", 3, false, map[string]any{"do_remote_prefill": true})
	if (got.Code == 200 && got.Finish != "error") || !strings.Contains(got.Raw, "transfer_id") {
		t.Fatalf("%d %s", got.Code, got.Raw)
	}
	if ok := complete(t, ctx, dec.URL, "hello there", 3, false); ok.Code != 200 || len(ok.TokenIDs) != 3 {
		t.Fatalf("engine stopped serving: %s", ok.Raw)
	}
	assertNoLeaks(t, dec)
}
