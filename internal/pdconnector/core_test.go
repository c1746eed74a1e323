package pdconnector

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/bootstrap"
	"github.com/kvcache-go/mooncake/transfer"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestProducerPullAfterFinish(t *testing.T) {
	p := NewProducerCore(480 * time.Second)
	if !p.Finished("x1", "r1", []int{4, 5, 6}, 40, true, t0) {
		t.Fatal("finished prefill not delay-freed")
	}
	if p.Held() != 1 {
		t.Fatalf("held %d", p.Held())
	}
	st, blocks, n, _ := p.StartPull("x1", t0)
	if st != PullReady || !reflect.DeepEqual(blocks, []int{4, 5, 6}) || n != 40 {
		t.Fatalf("StartPull = %v %v %d", st, blocks, n)
	}
	if st, _, _, _ := p.StartPull("x1", t0); st != PullBusy {
		t.Fatalf("second pull = %v, want busy", st)
	}
	if d := p.DrainDoneSending(); len(d) != 0 {
		t.Fatalf("freed while pushing: %v", d)
	}
	p.PushDone("x1", t0)
	if d := p.DrainDoneSending(); !reflect.DeepEqual(d, []string{"r1"}) {
		t.Fatalf("done sending %v", d)
	}
	if p.Held() != 0 || p.Freed(FreeDone) != 1 {
		t.Fatalf("held %d freed %d", p.Held(), p.Freed(FreeDone))
	}
	if st, _, _, _ := p.StartPull("x1", t0); st != PullGone {
		t.Fatalf("pull after free = %v, want gone", st)
	}
}

func TestProducerPullBeforeFinish(t *testing.T) {
	p := NewProducerCore(time.Minute)
	st, _, _, ch := p.StartPull("x1", t0)
	if st != PullWait || ch == nil {
		t.Fatalf("StartPull = %v", st)
	}
	if isClosed(ch) {
		t.Fatal("channel closed before finish")
	}
	p.Finished("x1", "r1", []int{1}, 3, true, t0)
	if !isClosed(ch) {
		t.Fatal("channel not closed by Finished")
	}
	if st, _, _, _ := p.StartPull("x1", t0); st != PullReady {
		t.Fatalf("after finish = %v", st)
	}
}

func TestProducerRelease(t *testing.T) {
	tests := []struct {
		name        string
		run         func(p *ProducerCore) (known, pushing bool)
		wantDone    []string
		wantDelay   bool
		wantRelease uint64
	}{
		{"ready", func(p *ProducerCore) (bool, bool) {
			p.Finished("x", "r", []int{1}, 2, true, t0)
			return p.Release("x", t0)
		}, []string{"r"}, true, 1},
		{"before finish", func(p *ProducerCore) (bool, bool) {
			k, pu := p.Release("x", t0)
			if p.Finished("x", "r", []int{1}, 2, true, t0) {
				t.Error("released transfer delay-freed")
			}
			return k, pu
		}, nil, false, 1},
		{"while pushing", func(p *ProducerCore) (bool, bool) {
			p.Finished("x", "r", []int{1}, 2, true, t0)
			p.StartPull("x", t0)
			k, pu := p.Release("x", t0)
			if d := p.DrainDoneSending(); len(d) != 0 {
				t.Error("freed under a running push")
			}
			p.PushDone("x", t0)
			return k, pu
		}, []string{"r"}, true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewProducerCore(time.Minute)
			known, pushing := tc.run(p)
			if tc.name == "before finish" && known {
				t.Error("unknown transfer reported known")
			}
			if tc.name == "while pushing" && !pushing {
				t.Error("pushing not reported")
			}
			if d := p.DrainDoneSending(); !reflect.DeepEqual(d, tc.wantDone) {
				t.Fatalf("done %v, want %v", d, tc.wantDone)
			}
			if p.Freed(FreeReleased) != tc.wantRelease || p.Held() != 0 {
				t.Fatalf("released %d held %d", p.Freed(FreeReleased), p.Held())
			}
			if st, _, _, _ := p.StartPull("x", t0); st != PullGone {
				t.Fatalf("pull after release = %v", st)
			}
		})
	}
}

func TestProducerReleaseWakesWaitingPull(t *testing.T) {
	p := NewProducerCore(time.Minute)
	_, _, _, ch := p.StartPull("x", t0)
	p.Release("x", t0)
	if !isClosed(ch) {
		t.Fatal("waiting pull not woken")
	}
	if st, _, _, _ := p.StartPull("x", t0); st != PullGone {
		t.Fatalf("= %v", st)
	}
	if p.Finished("x", "r", []int{1}, 2, true, t0) {
		t.Fatal("released transfer held")
	}
}

func TestProducerTimeout(t *testing.T) {
	p := NewProducerCore(480 * time.Second)
	p.Finished("x", "r", []int{1, 2}, 20, true, t0)
	if n := p.Tick(t0.Add(479 * time.Second)); n != 0 {
		t.Fatalf("freed early: %d", n)
	}
	if n := p.Tick(t0.Add(480 * time.Second)); n != 1 {
		t.Fatalf("timeout freed %d", n)
	}
	if d := p.DrainDoneSending(); !reflect.DeepEqual(d, []string{"r"}) || p.Freed(FreeTimeout) != 1 {
		t.Fatalf("done %v timeout %d", d, p.Freed(FreeTimeout))
	}
	// A pushing transfer is never freed by the timeout.
	p.Finished("y", "r2", []int{3}, 5, true, t0)
	p.StartPull("y", t0)
	if n := p.Tick(t0.Add(time.Hour)); n != 0 {
		t.Fatal("freed under a running push")
	}
	// Records of gone transfers expire.
	p.PushDone("y", t0.Add(time.Hour))
	p.Tick(t0.Add(3 * time.Hour))
	if len(p.gone) != 0 || len(p.entries) != 0 || len(p.tombstones) != 0 {
		t.Fatalf("records kept: %d %d %d", len(p.gone), len(p.entries), len(p.tombstones))
	}
}

func TestProducerFailedPrefill(t *testing.T) {
	p := NewProducerCore(time.Minute)
	_, _, _, ch := p.StartPull("x", t0)
	if p.Finished("x", "r", []int{1}, 2, false, t0) {
		t.Fatal("failed prefill held")
	}
	if !isClosed(ch) {
		t.Fatal("waiting pull not woken by failure")
	}
	if st, _, _, _ := p.StartPull("x", t0); st != PullFailed {
		t.Fatalf("= %v", st)
	}
	if d := p.DrainDoneSending(); len(d) != 0 {
		t.Fatalf("done sending for a non-held request: %v", d)
	}
	// Waiting pull for a prefill that never comes: forgotten at the deadline.
	_, _, _, ch = p.StartPull("never", t0)
	p.Tick(t0.Add(time.Minute))
	if !isClosed(ch) {
		t.Fatal("pull waiting for a prefill that never came was not woken")
	}
}

func TestConsumerPull(t *testing.T) {
	params := map[string]any{"do_remote_prefill": true, "transfer_id": "x", "remote_bootstrap_addr": "h:1", "remote_engine_id": "e"}
	rp, _, _ := ParseRemote("r", params)
	c := NewConsumerCore(16, true)
	n, async := c.Match("r", 40, 16)
	if n != 24 || !async {
		t.Fatalf("Match = %d %v", n, async)
	}
	c.AfterAlloc("r", rp, 40, 16, []int{7, 8, 9}, n)
	pulls, rels := c.TakeWork()
	want := PullSpec{ReqID: "r", TransferID: "x", Bootstrap: "h:1", EngineID: "e", NumTokens: 40, FirstBlock: 1, BlockIDs: []int{8, 9}, Contract: ContractMooncake}
	if len(pulls) != 1 || !reflect.DeepEqual(pulls[0], want) || len(rels) != 0 {
		t.Fatalf("work %+v %+v", pulls, rels)
	}
	if c.InFlight() != 1 {
		t.Fatal("not in flight")
	}
	c.PullDone("r", "", 1000, 5e6, 1e6, 2)
	ds, dr, inv := c.Drain()
	if len(ds) != 0 || !reflect.DeepEqual(dr, []string{"r"}) || len(inv) != 0 {
		t.Fatalf("drain %v %v %v", ds, dr, inv)
	}
	// Preempted later: recompute locally, never pull twice.
	if n, async := c.Match("r", 40, 0); n != 0 || async {
		t.Fatalf("second match %d %v", n, async)
	}
	delay, rel, rep := c.Finished("r", rp)
	out := rep.wire()
	if delay || rel != nil || out["kv_load"] != LoadRemote || out["kv_pull_bytes"] != int64(1000) || out["kv_write_ms"] != 1.0 || out["kv_write_requests"] != 2 {
		t.Fatalf("finished %v %v %v", delay, rel, out)
	}
}

// TestConsumerFirstToken: prefill's first token (aux data) is handed to the
// engine only after a successful pull; it is reported in the response.
func TestConsumerFirstToken(t *testing.T) {
	params := map[string]any{"do_remote_prefill": true, "transfer_id": "x", "remote_bootstrap_addr": "h:1"}
	rp, _, _ := ParseRemote("r", params)
	aux := bootstrap.Aux{FirstToken: 9, FirstLogprob: -1.5}
	for _, errMsg := range []string{"", "boom"} {
		c := NewConsumerCore(16, true)
		if _, ok := c.FirstToken("r"); ok {
			t.Fatal("first token before any pull")
		}
		c.Match("r", 20, 0)
		c.AfterAlloc("r", rp, 20, 0, []int{3, 4}, 20)
		c.TakeWork()
		c.PullDone("r", errMsg, 10, 0, 0, 1)
		c.SetAux("r", aux)
		got, ok := c.FirstToken("r")
		if ok != (errMsg == "") || (ok && got != aux) {
			t.Fatalf("pull error %q: FirstToken = %+v %v", errMsg, got, ok)
		}
		_, _, rep := c.Finished("r", rp)
		out := rep.wire()
		if errMsg == "" && (out["aux_first_token"] != 9 || out["aux_first_logprob"] != -1.5) {
			t.Fatalf("finished params %v", out)
		}
		if _, ok := c.FirstToken("r"); ok {
			t.Fatal("first token after the request finished")
		}
	}
}

func TestConsumerFailurePolicies(t *testing.T) {
	params := map[string]any{"do_remote_prefill": true, "transfer_id": "x", "remote_bootstrap_addr": "h:1"}
	rp, _, _ := ParseRemote("r", params)
	for _, recompute := range []bool{true, false} {
		c := NewConsumerCore(16, recompute)
		c.Match("r", 20, 0)
		c.AfterAlloc("r", rp, 20, 0, []int{3, 4}, 20)
		c.TakeWork()
		c.PullDone("r", "boom", 0, 0, 0, 0)
		_, dr, inv := c.Drain()
		if !reflect.DeepEqual(dr, []string{"r"}) || !reflect.DeepEqual(inv, []int{3, 4}) {
			t.Fatalf("drain %v %v", dr, inv)
		}
		_, _, rep := c.Finished("r", rp)
		out := rep.wire()
		want := LoadFailed
		if recompute {
			want = LoadRecomputed
		}
		if out["kv_load"] != want || out["kv_load_error"] != "boom" {
			t.Fatalf("recompute=%v: %v", recompute, out)
		}
		if c.Count("failed") != 1 {
			t.Fatal("failure not counted")
		}
	}
}

func TestConsumerFullHitAndAbort(t *testing.T) {
	params := map[string]any{"do_remote_prefill": true, "transfer_id": "x", "remote_bootstrap_addr": "h:1"}
	rp, _, _ := ParseRemote("r", params)
	c := NewConsumerCore(16, true)
	// Full hit: 33 tokens, 32 local: only the last token is missing.
	if n, async := c.Match("r", 33, 32); n != 0 || async {
		t.Fatalf("full hit match %d %v", n, async)
	}
	c.AfterAlloc("r", rp, 33, 32, []int{1, 2, 3}, 0)
	pulls, rels := c.TakeWork()
	if len(pulls) != 0 || len(rels) != 1 || rels[0].TransferID != "x" {
		t.Fatalf("full hit work %v %v", pulls, rels)
	}
	if _, _, rep := c.Finished("r", rp); rep.wire()["kv_load"] != LoadLocal {
		t.Fatalf("full hit params %v", rep)
	}
	// Abort while running: blocks kept until the pull ends.
	c.Match("a", 20, 0)
	c.AfterAlloc("a", rp, 20, 0, []int{5, 6}, 20)
	c.TakeWork()
	delay, rel, rep := c.Finished("a", rp)
	out := rep.wire()
	if !delay || rel == nil || out["kv_load"] != LoadAborted {
		t.Fatalf("abort %v %v %v", delay, rel, out)
	}
	c.PullDone("a", "cancelled", 0, 0, 0, 0)
	ds, dr, inv := c.Drain()
	if !reflect.DeepEqual(ds, []string{"a"}) || len(dr) != 0 || len(inv) != 0 {
		t.Fatalf("abort drain %v %v %v", ds, dr, inv)
	}
	// Abort while queued: freed at once, never started.
	c.Match("q", 20, 0)
	c.AfterAlloc("q", rp, 20, 0, []int{5, 6}, 20)
	if delay, rel, _ := c.Finished("q", rp); delay || rel == nil {
		t.Fatal("queued abort")
	}
	if pulls, _ := c.TakeWork(); len(pulls) != 0 {
		t.Fatalf("aborted pull started: %v", pulls)
	}
	if c.InFlight() != 0 {
		t.Fatal("in flight after aborts")
	}
}

func TestConsumerParams(t *testing.T) {
	if _, ok, err := ParseRemote("r", nil); ok || err != nil {
		t.Fatal("plain request matched")
	}
	if _, _, err := ParseRemote("r", map[string]any{"do_remote_prefill": true}); err == nil {
		t.Fatal("missing transfer id accepted")
	}
	if _, ok, err := ParseRemote("r", map[string]any{"do_remote_prefill": "yes", "transfer_id": "x"}); ok || err != nil {
		t.Fatal("non-bool flag treated as remote")
	}
}

func one(bases ...uint64) Side { return Side{Bases: [][]uint64{bases}, RankHeads: 1} }

func TestPlanWritesGroupsRuns(t *testing.T) {
	byLayer, err := PlanWrites(7, one(1000, 5000), one(90000, 70000), 10, []int{3, 4, 5, 9}, []int{10, 11, 12, 13})
	if err != nil {
		t.Fatal(err)
	}
	// One scatter-gather request per layer: one extent per run of blocks.
	want := [][]transfer.Request{{
		{Op: transfer.OpWrite, Segment: 7, Length: 40, Extents: []transfer.Extent{{Local: 1030, Remote: 90100, Length: 30}, {Local: 1090, Remote: 90130, Length: 10}}},
	}, {
		{Op: transfer.OpWrite, Segment: 7, Length: 40, Extents: []transfer.Extent{{Local: 5030, Remote: 70100, Length: 30}, {Local: 5090, Remote: 70130, Length: 10}}},
	}}
	if !reflect.DeepEqual(byLayer, want) {
		t.Fatalf("plan\n%+v\nwant\n%+v", byLayer, want)
	}
	// One run is a plain request.
	reqs, _ := PlanLayerWrites(1, one(0), one(0), 1, []int{1, 2}, []int{5, 6}, 0)
	if len(reqs) != 1 || reqs[0].Extents != nil || reqs[0].Length != 2 || reqs[0].Local != 1 || reqs[0].Remote != 5 {
		t.Fatalf("one run: %+v", reqs)
	}
	// A break on the destination side splits the extents.
	reqs, _ = PlanLayerWrites(1, one(0), one(0), 1, []int{1, 2}, []int{5, 7}, 0)
	if len(reqs) != 1 || len(reqs[0].Extents) != 2 {
		t.Fatalf("dst break not split: %v", reqs)
	}
	if _, err := PlanWrites(1, one(0), one(0), 1, []int{1}, nil); err == nil {
		t.Fatal("length mismatch accepted")
	}
	if _, err := PlanWrites(1, one(0), one(0, 1), 1, nil, nil); err == nil {
		t.Fatal("layer mismatch accepted")
	}
	if _, err := PlanLayerWrites(1, one(0), one(0), 1, nil, nil, 1); err == nil {
		t.Fatal("layer out of range accepted")
	}
}

// TestPlanWritesAcrossTP: prefill TP 2 (2 heads per rank) to decode TP 1
// (4 heads) and back, head bytes 10: one scatter-gather request per layer,
// each head range of a block one extent, at the head's offset in the other
// side's block, ordered by block then rank pair.
func TestPlanWritesAcrossTP(t *testing.T) {
	tp2 := Side{Bases: [][]uint64{{1000}, {2000}}, RankHeads: 2}
	tp1 := Side{Bases: [][]uint64{{50000}}, RankHeads: 4}
	got, err := PlanLayerWrites(3, tp2, tp1, 10, []int{0, 1}, []int{4, 5}, 0)
	if err != nil {
		t.Fatal(err)
	}
	x := func(local uintptr, remote uint64) transfer.Extent {
		return transfer.Extent{Local: local, Remote: remote, Length: 20}
	}
	sg := func(ext ...transfer.Extent) []transfer.Request {
		return []transfer.Request{{Op: transfer.OpWrite, Segment: 3, Length: 20 * len(ext), Extents: ext}}
	}
	// Blocks are 20 bytes on a TP 2 rank, 40 on the TP 1 engine.
	want := sg(x(1000, 50160), x(2000, 50180), x(1020, 50200), x(2020, 50220))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tp 2 -> 1\n%+v\nwant\n%+v", got, want)
	}
	got, _ = PlanLayerWrites(3, tp1, tp2, 10, []int{4, 5}, []int{0, 1}, 0)
	back := sg(x(50160, 1000), x(50180, 2000), x(50200, 1020), x(50220, 2020))
	if !reflect.DeepEqual(got, back) {
		t.Fatalf("tp 1 -> 2\n%+v\nwant\n%+v", got, back)
	}
	// Equal TP 2: each rank's run of blocks is one extent.
	got, _ = PlanLayerWrites(3, tp2, Side{Bases: [][]uint64{{7000}, {9000}}, RankHeads: 2}, 10, []int{0, 1}, []int{4, 5}, 0)
	eq := []transfer.Request{{Op: transfer.OpWrite, Segment: 3, Length: 80, Extents: []transfer.Extent{{Local: 1000, Remote: 7080, Length: 40}, {Local: 2000, Remote: 9080, Length: 40}}}}
	if !reflect.DeepEqual(got, eq) {
		t.Fatalf("tp 2 -> 2\n%+v\nwant\n%+v", got, eq)
	}
	// A pull covering only decode rank 1 gets heads 2 and 3 only.
	got, _ = PlanLayerWrites(3, tp1, Side{Bases: [][]uint64{{2000}}, FirstRank: 1, RankHeads: 2}, 10, []int{4}, []int{0}, 0)
	if len(got) != 1 || !reflect.DeepEqual(got[0], transfer.Request{Op: transfer.OpWrite, Local: 50180, Segment: 3, Remote: 2000, Length: 20}) {
		t.Fatalf("rank 1 alone: %+v", got)
	}
}

func TestParseRemoteContracts(t *testing.T) {
	tests := []struct {
		name   string
		params map[string]any
		want   RemoteParams
		err    string
	}{
		{"mooncake", map[string]any{"do_remote_prefill": true, "transfer_id": "x1", "remote_bootstrap_addr": "h:1", "remote_engine_id": "e"},
			RemoteParams{TransferID: "x1", Bootstrap: "h:1", EngineID: "e", Contract: ContractMooncake}, ""},
		{"reworked url", map[string]any{"do_remote_prefill": true, "transfer_id": "x1", "remote_bootstrap_addr": "http://h:8998"},
			RemoteParams{TransferID: "x1", Bootstrap: "h:8998", Contract: ContractMooncake}, ""},
		{"example proxy", map[string]any{"do_remote_prefill": true, "bootstrap_server_host": "10.0.0.1", "bootstrap_server_port": 8998.0},
			RemoteParams{TransferID: "req", Bootstrap: "10.0.0.1:8998", Contract: ContractVLLMBootstrap}, ""},
		{"example proxy ipv6", map[string]any{"do_remote_prefill": true, "bootstrap_server_host": "[::1]", "bootstrap_server_port": 9.0},
			RemoteParams{TransferID: "req", Bootstrap: "[::1]:9", Contract: ContractVLLMBootstrap}, ""},
		{"seed", map[string]any{"do_remote_prefill": true, "remote_host": "h", "remote_port": "7"},
			RemoteParams{TransferID: "req", Bootstrap: "h:7", Contract: ContractVLLMSeed}, ""},
		{"sglang", map[string]any{"do_remote_prefill": true, "bootstrap_host": "h", "bootstrap_port": "8998", "bootstrap_room": "9223372036854775807"},
			RemoteParams{TransferID: "sglang-room-9223372036854775807", Bootstrap: "h:8998", Contract: ContractSGLang}, ""},
		{"no address", map[string]any{"do_remote_prefill": true}, RemoteParams{}, "bootstrap address"},
		{"port out of range", map[string]any{"do_remote_prefill": true, "remote_host": "h", "remote_port": 70000.0}, RemoteParams{}, "out of range"},
		{"port fraction", map[string]any{"do_remote_prefill": true, "remote_host": "h", "remote_port": 1.5}, RemoteParams{}, "out of range"},
		{"host missing", map[string]any{"do_remote_prefill": true, "bootstrap_server_port": 1.0}, RemoteParams{}, "bootstrap_server_host is required"},
		{"room negative", map[string]any{"do_remote_prefill": true, "bootstrap_host": "h", "bootstrap_port": 1.0, "bootstrap_room": -1.0}, RemoteParams{}, "bootstrap_room"},
		{"engine id type", map[string]any{"do_remote_prefill": true, "remote_engine_id": 3.0, "remote_bootstrap_addr": "h:1"}, RemoteParams{}, "remote_engine_id must be a string"},
	}
	for _, tc := range tests {
		got, ok, err := ParseRemote("req", tc.params)
		if !ok {
			t.Fatalf("%s: not a remote request", tc.name)
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errBadParams) {
				t.Fatalf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Fatalf("%s: %+v %v, want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestPrepareParamsSGLang(t *testing.T) {
	in := map[string]any{"bootstrap_host": "h", "bootstrap_port": "1", "bootstrap_room": "5"}
	out, one, err := PrepareParams(RoleProducer, in)
	if err != nil || !one || out["do_remote_decode"] != true || in["do_remote_decode"] != nil {
		t.Fatalf("producer: %v %v %v", out, one, err)
	}
	if k, c, ok, _ := prefillKey("r", out); !ok || k != "sglang-room-5" || c != ContractSGLang {
		t.Fatalf("prefill key %q %q", k, c)
	}
	out, one, err = PrepareParams(RoleConsumer, in)
	if err != nil || one || out["do_remote_prefill"] != true {
		t.Fatalf("consumer: %v %v %v", out, one, err)
	}
	if _, _, err := PrepareParams(RoleBoth, in); err == nil {
		t.Fatal("role both accepted an SGLang room")
	}
	if k, _, _, _ := prefillKey("req-7", map[string]any{"do_remote_decode": true}); k != "req-7" {
		t.Fatalf("no transfer id: key %q, want the request id", k)
	}
}
