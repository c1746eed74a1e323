package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/pdconnector"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// Layer-wise streaming gives the same tokens as whole-request transfer and
// as a colocated engine, with the prefill chunked (each chunk's layers are
// streamed as they finish) and the KV on a TCP link slow enough that the
// writes run while the prefill computes; nothing leaks.
func TestLayerwiseEqualsWholeRequestAndColocated(t *testing.T) {
	col := startColocated(t)
	inst := cluster.InstanceConfig{MaxNumBatchedTokens: 16, Transport: "tcp", LinkRate: 1 << 20}
	layer := startCluster(t, cluster.Config{Instance: inst})
	inst.PDWholeRequest = true
	whole := startCluster(t, cluster.Config{Instance: inst})
	ctx := context.Background()
	ps := append(append([]string(nil), prompts...), strings.Repeat("layer by layer, chunk by chunk. ", 12))
	for i, p := range ps {
		stream := i%2 == 1
		want := complete(t, ctx, col.URL, p, 8, false)
		for _, c := range []struct {
			name      string
			base      string
			layerwise bool
		}{{"layer-wise", layer.URL, true}, {"whole-request", whole.URL, false}} {
			got := complete(t, ctx, c.base, p, 8, stream)
			if want.Code != 200 || got.Code != 200 {
				t.Fatalf("prompt %d %s: colocated %d %s, P/D %d %s", i, c.name, want.Code, want.Raw, got.Code, got.Raw)
			}
			if !equalInts(want.TokenIDs, got.TokenIDs) || want.Text != got.Text {
				t.Fatalf("prompt %d %s (stream %v): %v %q != colocated %v %q", i, c.name, stream, got.TokenIDs, got.Text, want.TokenIDs, want.Text)
			}
			if !stream && (got.KV["kv_load"] != "remote" || got.KV["kv_layerwise"] != c.layerwise) {
				t.Fatalf("prompt %d %s: kv_transfer_params %v", i, c.name, got.KV)
			}
		}
	}
	if n := layer.Prefill[0].Conn.Stats().StreamWrites; n == 0 {
		t.Fatal("the layer-wise cluster wrote nothing layer by layer")
	}
	if n := whole.Prefill[0].Conn.Stats().StreamWrites; n != 0 {
		t.Fatalf("the whole-request cluster streamed %d writes", n)
	}
	for _, c := range []*cluster.Cluster{layer, whole} {
		assertNoLeaks(t, c.Prefill[0], c.Decode[0])
		if s := c.Prefill[0].Conn.Stats(); s.FreedDone != uint64(len(ps)) {
			t.Fatalf("prefill freed %+v, want %d done", s, len(ps))
		}
	}
}

// slowPair is a producer and a consumer of the small model whose prefill
// runs in 32-token chunks (a long prompt takes many steps) and whose KV
// moves over a TCP link of 256 KB/s: a stream is in flight for a while.
func slowPair(t *testing.T) (pre, dec *cluster.Instance) {
	t.Helper()
	m, err := model.NewBuiltin("small", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base := cluster.InstanceConfig{Model: m, MaxNumBatchedTokens: 32, Transport: "tcp", LinkRate: 256e3}
	pc, dc := base, base
	pc.Role, dc.Role = pdconnector.RoleProducer, pdconnector.RoleConsumer
	if pre, err = cluster.StartInstance(ctx, pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pre.Close() })
	if dec, err = cluster.StartInstance(ctx, dc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dec.Close() })
	return pre, dec
}

// The prefill request is aborted (its client went away) while its KV is
// streamed and it still computes: the write in flight ends, the pull is
// answered failed, decode recomputes (and answers normally), and neither
// side keeps a block.
func TestLayerwiseAbortPrefillMidStream(t *testing.T) {
	pre, dec := slowPair(t)
	ctx := context.Background()
	prompt := strings.Repeat("a prefill that will not finish. ", 12)
	pctx, cancelPre := context.WithCancel(ctx)
	defer cancelPre()
	preDone := make(chan completion, 1)
	go func() {
		preDone <- completeKV(t, pctx, pre.URL, prompt, 1, false, map[string]any{"do_remote_decode": true, "transfer_id": "xfer-abort"})
	}()
	decDone := make(chan completion, 1)
	go func() {
		decDone <- completeKV(t, ctx, dec.URL, prompt, 4, false, map[string]any{"do_remote_prefill": true,
			"transfer_id": "xfer-abort", "remote_bootstrap_addr": pre.BootstrapAddr(), "remote_engine_id": pre.Conn.EngineID()})
	}()
	waitfor.Cond(t, 60*time.Second, "a layer written while the prefill computes", func() bool {
		return pre.Conn.Stats().StreamWrites > 0
	})
	cancelPre()
	pc := <-preDone
	dc := <-decDone
	t.Logf("prefill half %d %q; decode kv %v; prefill %+v", pc.Code, pc.Finish, dc.KV, pre.Conn.Stats())
	if dc.Code != 200 || len(dc.TokenIDs) != 4 {
		t.Fatalf("decode: %d %s", dc.Code, dc.Raw)
	}
	if pc.Code == 0 && dc.KV["kv_load"] != "recomputed" {
		// The prefill was aborted: decode cannot have got the whole KV.
		t.Fatalf("decode kv_load %v after the prefill was aborted mid-stream: %v", dc.KV["kv_load"], dc.KV)
	}
	assertNoLeaks(t, pre, dec)
}

// Decode's client goes away while the KV is streamed: decode releases the
// transfer, the pusher stops, the prefill (still computing or done) frees
// its blocks; nothing is held on either side.
func TestLayerwiseReleaseMidStream(t *testing.T) {
	pre, dec := slowPair(t)
	ctx := context.Background()
	prompt := strings.Repeat("a decode that will not wait. ", 12)
	preDone := make(chan completion, 1)
	go func() {
		preDone <- completeKV(t, ctx, pre.URL, prompt, 1, false, map[string]any{"do_remote_decode": true, "transfer_id": "xfer-rel"})
	}()
	dctx, cancelDec := context.WithCancel(ctx)
	defer cancelDec()
	decDone := make(chan struct{})
	go func() {
		defer close(decDone)
		completeKV(t, dctx, dec.URL, prompt, 4, false, map[string]any{"do_remote_prefill": true,
			"transfer_id": "xfer-rel", "remote_bootstrap_addr": pre.BootstrapAddr(), "remote_engine_id": pre.Conn.EngineID()})
	}()
	waitfor.Cond(t, 60*time.Second, "a layer written", func() bool { return pre.Conn.Stats().StreamWrites > 0 })
	cancelDec()
	<-decDone
	if pc := <-preDone; pc.Code != 200 {
		t.Fatalf("prefill half: %d %s", pc.Code, pc.Raw)
	}
	assertNoLeaks(t, pre, dec)
	s := pre.Conn.Stats()
	t.Logf("prefill %+v decode %+v", s, dec.Conn.Stats())
	if s.FreedTimeout != 0 || s.Pushing != 0 || s.FreedReleased+s.FreedDone != 1 {
		t.Fatalf("prefill %+v", s)
	}
}

// A prefill request preempted while its KV is streamed (its blocks are
// freed and reused by the engine) breaks the stream: decode recomputes and
// answers what a colocated engine does; nothing leaks on either side. The
// pull attaches first (decode's half before prefill's), then a plain
// request and the streamed prefill share a 16-block pool they cannot both
// fit in: the plain one, admitted first, grows while the streamed one
// prefills in chunks, and the streamed one (the last admitted) is
// preempted.
func TestLayerwisePreemptedMidStream(t *testing.T) {
	col := startColocated(t)
	pre, dec := pdPair(t, cluster.InstanceConfig{NumBlocks: 16, MaxNumBatchedTokens: 32, DisablePrefixCaching: true}, cluster.InstanceConfig{})
	ctx := context.Background()
	promptB := strings.Repeat("preempt me while streaming. ", 8)[:199] // 200 tokens with BOS: 13 blocks
	promptA := strings.Repeat("a plain request. ", 4)[:59]             // 60 tokens, 200 with its output: 13 blocks
	decDone := make(chan completion, 1)
	go func() {
		decDone <- completeKV(t, ctx, dec.URL, promptB, 6, false, map[string]any{"do_remote_prefill": true,
			"transfer_id": "xfer-pre", "remote_bootstrap_addr": pre.BootstrapAddr(), "remote_engine_id": pre.Conn.EngineID()})
	}()
	waitfor.Cond(t, 20*time.Second, "decode's pull attached", func() bool { return pre.Conn.Stats().Pushing == 1 })
	aDone := make(chan completion, 1)
	go func() { aDone <- complete(t, ctx, pre.URL, promptA, 140, false) }()
	waitfor.Cond(t, 20*time.Second, "the plain request running", func() bool { return pre.Engine.Stats().Running == 1 })
	bDone := make(chan completion, 1)
	go func() {
		bDone <- completeKV(t, ctx, pre.URL, promptB, 1, false, map[string]any{"do_remote_decode": true, "transfer_id": "xfer-pre"})
	}()
	a, b, d := <-aDone, <-bDone, <-decDone
	if a.Code != 200 || b.Code != 200 || d.Code != 200 {
		t.Fatalf("plain %d %s, prefill half %d %s, decode %d %s", a.Code, a.Raw, b.Code, b.Raw, d.Code, d.Raw)
	}
	preemptions := pre.Engine.Stats().Preemptions
	t.Logf("preemptions %d, decode kv %v", preemptions, d.KV)
	if preemptions == 0 {
		t.Fatal("the streamed prefill was not preempted: the test's pool arithmetic is off")
	}
	if d.KV["kv_load"] != "recomputed" {
		t.Fatalf("decode kv_load %v after the prefill was preempted mid-stream, want recomputed", d.KV)
	}
	if want := complete(t, ctx, col.URL, promptB, 6, false); !equalInts(want.TokenIDs, d.TokenIDs) {
		t.Fatalf("decode %v != colocated %v", d.TokenIDs, want.TokenIDs)
	}
	assertNoLeaks(t, pre, dec)
}
