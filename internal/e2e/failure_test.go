package e2e

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/engine"
	"github.com/kvcache-go/mooncake/internal/pdconnector"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func TestPartialAndFullPrefixHitOnDecode(t *testing.T) {
	col := startColocated(t)
	c := startCluster(t, cluster.Config{})
	ctx := context.Background()
	base := strings.Repeat("abcdefghijklmnop", 8) // 128 bytes + BOS = 129 tokens: 8 full blocks
	first := complete(t, ctx, c.URL, base, 4, false)
	if first.KV["kv_load"] != "remote" {
		t.Fatalf("first: %v %s", first.KV, first.Raw)
	}
	fullBytes := first.KV["kv_pull_bytes"].(float64)

	// Partial hit: decode holds the first 8 blocks, pulls only the rest.
	long := base + " and then some more text that decode has never seen before."
	want := complete(t, ctx, col.URL, long, 8, false)
	got := complete(t, ctx, c.URL, long, 8, false)
	if got.Code != 200 || !equalInts(got.TokenIDs, want.TokenIDs) {
		t.Fatalf("partial hit: %v %s != %v", got.TokenIDs, got.Raw, want.TokenIDs)
	}
	pulled := got.KV["kv_pull_bytes"].(float64)
	// 129+60 tokens = 12 blocks, 8 local: 4 pulled; the first pull moved 9.
	if got.KV["kv_load"] != "remote" || pulled != fullBytes/9*4 {
		t.Fatalf("partial hit pulled %v bytes (full prompt %v): %v", pulled, fullBytes, got.KV)
	}
	// The local blocks and the pulled ones make the whole prompt: decode
	// takes prefill's first token.
	if got.KV["first_token_from_prefill"] != true {
		t.Fatalf("partial hit: first token not from prefill: %v", got.KV)
	}

	// Full hit: everything but the last token is local: nothing is sent,
	// prefill frees on decode's release.
	pre := c.Prefill[0]
	before := pre.Conn.Stats().FreedReleased
	want = complete(t, ctx, col.URL, base, 6, false)
	got = complete(t, ctx, c.URL, base, 6, false)
	if !equalInts(got.TokenIDs, want.TokenIDs) || got.KV["kv_load"] != "local" || got.KV["first_token_from_prefill"] != false {
		t.Fatalf("full hit: %v %v != %v", got.KV, got.TokenIDs, want.TokenIDs)
	}
	waitfor.Cond(t, 10*time.Second, "prefill freed on release", func() bool { return pre.Conn.Stats().FreedReleased == before+1 })
	assertNoLeaks(t, pre, c.Decode[0])
}

// A pull that cannot complete (prefill never got the request) ends within
// the pull timeout: with policy recompute the request is prefilled locally
// and still answers the right tokens; with policy fail it ends with an error.
func TestDecodePullTimeoutPolicies(t *testing.T) {
	col := startColocated(t)
	ctx := context.Background()
	pre, err := cluster.StartInstance(ctx, cluster.InstanceConfig{Model: tinyModel(t), Role: pdconnector.RoleProducer})
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Close()
	prompt := "A prompt whose prefill never happens on the prefill side."
	want := complete(t, ctx, col.URL, prompt, 5, false)
	for _, policy := range []string{engine.PolicyRecompute, engine.PolicyFail} {
		t.Run(policy, func(t *testing.T) {
			dec, err := cluster.StartInstance(ctx, cluster.InstanceConfig{Model: tinyModel(t), Role: pdconnector.RoleConsumer,
				FailurePolicy: policy, PullTimeout: 400 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer dec.Close()
			start := time.Now()
			got := completeKV(t, ctx, dec.URL, prompt, 5, false, map[string]any{"do_remote_prefill": true,
				"transfer_id": "xfer-never-" + policy, "remote_bootstrap_addr": pre.BootstrapAddr(), "remote_engine_id": pre.Conn.EngineID()})
			if el := time.Since(start); el > 10*time.Second {
				t.Fatalf("took %v", el)
			}
			if policy == engine.PolicyRecompute {
				if got.Code != 200 || !equalInts(got.TokenIDs, want.TokenIDs) || got.KV["kv_load"] != "recomputed" ||
					!strings.Contains(got.KV["kv_load_error"].(string), "did not finish in time") {
					t.Fatalf("recompute: %d %s", got.Code, got.Raw)
				}
				if v := metricValue(t, dec.URL, `mooncake_pd_kv_loads_total{load="recomputed"}`); v != 1 {
					t.Fatalf("recomputed metric %v", v)
				}
				if got.KV["first_token_from_prefill"] != false || dec.Engine.Stats().PromptTokens == 0 {
					t.Fatalf("recompute: the first token must be decode's own: %v", got.KV)
				}
				if v := metricValue(t, dec.URL, `mooncake_pd_first_token_total{source="decode"}`); v != 1 {
					t.Fatalf("first token from decode metric %v", v)
				}
			} else {
				if got.Code == 200 && got.Finish != "error" {
					t.Fatalf("fail policy answered %d %s", got.Code, got.Raw)
				}
				if v := metricValue(t, dec.URL, `mooncake_pd_pulls_total{result="failed"}`); v != 1 {
					t.Fatalf("failed metric %v", v)
				}
			}
			assertNoLeaks(t, dec)
		})
	}
	assertNoLeaks(t, pre)
}

// Prefill holds a finished prefill's blocks for decode, and frees them
// after its abort timeout when decode never asks.
func TestPrefillFreesAfterAbortTimeout(t *testing.T) {
	ctx := context.Background()
	pre, err := cluster.StartInstance(ctx, cluster.InstanceConfig{Model: tinyModel(t), Role: pdconnector.RoleProducer,
		AbortTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Close()
	got := completeKV(t, ctx, pre.URL, strings.Repeat("held blocks ", 6), 1, false,
		map[string]any{"do_remote_decode": true, "transfer_id": "xfer-orphan"})
	if got.Code != 200 || got.KV["transfer_id"] != "xfer-orphan" || got.KV["remote_bootstrap_addr"] != pre.BootstrapAddr() {
		t.Fatalf("%d %s", got.Code, got.Raw)
	}
	if s := pre.Engine.Stats(); s.DelayedFree != 1 || s.BlocksUsed == 0 {
		t.Fatalf("blocks not held for the pull: %+v", s)
	}
	waitfor.Cond(t, 10*time.Second, "abort timeout", func() bool { return pre.Conn.Stats().FreedTimeout == 1 })
	assertNoLeaks(t, pre)
	if v := metricValue(t, pre.URL, `mooncake_pd_freed_total{reason="timeout"}`); v != 1 {
		t.Fatalf("timeout metric %v", v)
	}
}

// Peers with different KV layouts are refused at the handshake with a
// clear error; with recompute the request still answers correctly.
func TestIncompatiblePeerRefused(t *testing.T) {
	col := startColocated(t)
	c := startCluster(t, cluster.Config{Instance: cluster.InstanceConfig{BlockSize: 16}})
	ctx := context.Background()
	dec, err := cluster.StartInstance(ctx, cluster.InstanceConfig{Model: tinyModel(t), Role: pdconnector.RoleConsumer, BlockSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	pre := c.Prefill[0]
	prompt := "compatibility hashes differ in block size"
	// Prefill half first, as the proxy would send it.
	pc := completeKV(t, ctx, pre.URL, prompt, 1, false, map[string]any{"do_remote_decode": true, "transfer_id": "xfer-incompat"})
	if pc.Code != 200 {
		t.Fatal(pc.Raw)
	}
	got := completeKV(t, ctx, dec.URL, prompt, 5, false, map[string]any{"do_remote_prefill": true,
		"transfer_id": "xfer-incompat", "remote_bootstrap_addr": pre.BootstrapAddr()})
	want := complete(t, ctx, col.URL, prompt, 5, false)
	if got.Code != 200 || !equalInts(got.TokenIDs, want.TokenIDs) || got.KV["kv_load"] != "recomputed" ||
		!strings.Contains(got.KV["kv_load_error"].(string), "incompatible peer") {
		t.Fatalf("%d %s", got.Code, got.Raw)
	}
	// Decode's failed pull released nothing: prefill frees by its timeout or
	// a release; the decode request's end sends none, so release explicitly
	// as the proxy does on failure paths and check nothing leaks.
	waitfor.Cond(t, 5*time.Second, "prefill holds", func() bool { return pre.Conn.Stats().Held == 1 })
	if !pre.Conn.Release("xfer-incompat") {
		t.Fatal("transfer unknown to prefill")
	}
	assertNoLeaks(t, pre, dec)
}

// A client that disconnects from a stream frees both sides' blocks.
func TestClientDisconnectFreesBothSides(t *testing.T) {
	c := startCluster(t, cluster.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"prompt":"` + strings.Repeat("stream me ", 10) + `","max_tokens":800,"ignore_eos":true,"temperature":0,"stream":true}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ { // a few tokens have streamed
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream: %v (%q)", err, line)
		}
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	cancel()
	resp.Body.Close()
	assertNoLeaks(t, c.Prefill[0], c.Decode[0])
	waitfor.Cond(t, 5*time.Second, "proxy disconnect metric", func() bool {
		return metricValue(t, c.URL, "mooncake_proxy_client_disconnects_total") == 1
	})
}

// A prefill instance that dies: requests keep succeeding (through the
// other prefill instance, or by recomputing), and once it is back on the
// same ports the proxy puts it back in rotation.
func TestPrefillDiesPeersUnaffectedNoBlacklist(t *testing.T) {
	col := startColocated(t)
	c := startCluster(t, cluster.Config{Prefill: 2, Decode: 1})
	ctx := context.Background()
	dead := c.Prefill[0]
	url, boot := dead.URL, dead.BootstrapAddr()
	dead.Close()
	prompts := []string{"one prompt after the crash", "another prompt after the crash", "and a third one here", "fourth"}
	for _, p := range prompts {
		want := complete(t, ctx, col.URL, p, 6, false)
		got := complete(t, ctx, c.URL, p, 6, false)
		if got.Code != 200 || !equalInts(got.TokenIDs, want.TokenIDs) {
			t.Fatalf("after crash: %d %s", got.Code, got.Raw)
		}
	}
	waitfor.Cond(t, 10*time.Second, "dead instance out of rotation", func() bool { return !c.Proxy.Ready() })
	// Now every request goes to the survivor and is pulled.
	got := complete(t, ctx, c.URL, "after detection", 4, false)
	if got.KV["kv_load"] != "remote" {
		t.Fatalf("survivor not used: %v", got.KV)
	}
	// Restart on the same ports: back in rotation.
	port := url[strings.LastIndex(url, ":")+1:]
	bport := boot[strings.LastIndex(boot, ":")+1:]
	re, err := cluster.StartInstance(ctx, cluster.InstanceConfig{Model: tinyModel(t), Role: pdconnector.RoleProducer,
		Port: atoi(t, port), BootstrapPort: atoi(t, bport)})
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	waitfor.Cond(t, 20*time.Second, "restarted instance back in rotation", c.Proxy.Ready)
	for i := 0; i < 4; i++ {
		if got := complete(t, ctx, c.URL, "back again "+strings.Repeat("x", i), 3, false); got.Code != 200 || got.KV["kv_load"] != "remote" {
			t.Fatalf("after restart: %s", got.Raw)
		}
	}
	assertNoLeaks(t, c.Prefill[1], c.Decode[0], re)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, ch := range s {
		if ch < '0' || ch > '9' {
			t.Fatalf("bad port %q", s)
		}
		n = n*10 + int(ch-'0')
	}
	return n
}

// A prefill instance that is shut down while decode waits for its KV: the
// pull fails within the deadline and decode recomputes; decode leaks nothing.
func TestPrefillKilledMidRequest(t *testing.T) {
	col := startColocated(t)
	ctx := context.Background()
	pre, dec := pdPair(t, cluster.InstanceConfig{MaxNumBatchedTokens: 16}, // a slow prefill: one block per step
		cluster.InstanceConfig{})
	prompt := strings.Repeat("a long prompt that takes a while to prefill. ", 6)
	want := complete(t, ctx, col.URL, prompt, 4, false)
	preDone := make(chan completion, 1)
	go func() {
		preDone <- completeKV(t, ctx, pre.URL, prompt, 1, false, map[string]any{"do_remote_decode": true, "transfer_id": "xfer-killed"})
	}()
	decDone := make(chan completion, 1)
	go func() {
		decDone <- completeKV(t, ctx, dec.URL, prompt, 4, false, map[string]any{"do_remote_prefill": true,
			"transfer_id": "xfer-killed", "remote_bootstrap_addr": pre.BootstrapAddr(), "remote_engine_id": pre.Conn.EngineID()})
	}()
	waitfor.Cond(t, 20*time.Second, "decode pulling while prefill computes", func() bool {
		return dec.Conn.Stats().PullsInFlight == 1 && pre.Engine.Stats().Running == 1
	})
	start := time.Now()
	pre.Close()
	var got completion
	select {
	case got = <-decDone:
	case <-time.After(20 * time.Second):
		t.Fatal("decode request hangs after the prefill died")
	}
	<-preDone
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("decode took %v to notice: %s", el, got.Raw)
	}
	if got.Code != 200 || got.KV["kv_load"] != "recomputed" || !equalInts(got.TokenIDs, want.TokenIDs) {
		t.Fatalf("after prefill death: %d %s", got.Code, got.Raw)
	}
	assertNoLeaks(t, dec)
}

// The client of decode goes away while decode waits for the KV: decode
// keeps its blocks until prefill stopped (the pull's answer), tells prefill
// to release, and both sides end with nothing held.
func TestClientDisconnectDuringPull(t *testing.T) {
	ctx := context.Background()
	pre, dec := pdPair(t, cluster.InstanceConfig{MaxNumBatchedTokens: 16}, cluster.InstanceConfig{})
	prompt := strings.Repeat("the client will not wait for this one. ", 8)
	preDone := make(chan completion, 1)
	go func() {
		preDone <- completeKV(t, ctx, pre.URL, prompt, 1, false, map[string]any{"do_remote_decode": true, "transfer_id": "xfer-gone"})
	}()
	cctx, cancel := context.WithCancel(ctx)
	decDone := make(chan struct{})
	go func() {
		defer close(decDone)
		completeKV(t, cctx, dec.URL, prompt, 4, false, map[string]any{"do_remote_prefill": true,
			"transfer_id": "xfer-gone", "remote_bootstrap_addr": pre.BootstrapAddr(), "remote_engine_id": pre.Conn.EngineID()})
	}()
	waitfor.Cond(t, 20*time.Second, "decode pulling", func() bool { return dec.Conn.Stats().PullsInFlight == 1 })
	cancel()
	<-decDone
	if pc := <-preDone; pc.Code != 200 {
		t.Fatalf("prefill half: %s", pc.Raw)
	}
	assertNoLeaks(t, pre, dec)
	t.Logf("decode %+v prefill %+v", dec.Conn.Stats(), pre.Conn.Stats())
	if s := dec.Conn.Stats(); s.PullsAborted+s.PullsOK != 1 {
		t.Fatalf("decode pull neither aborted nor done: %+v", s)
	}
	if s := pre.Conn.Stats(); s.FreedReleased+s.FreedDone != 1 || s.FreedTimeout != 0 {
		t.Fatalf("prefill freed %+v", s)
	}
}
