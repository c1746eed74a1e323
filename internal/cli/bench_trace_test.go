package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sixLineTrace: the same six requests as tracesim's hand-worked test
// (ideal 9 hits of 16 blocks; capacity 4: LRU 6, LFU 7, LengthAware 8, TailFirst 8,
// Retention 8).
var sixLineTrace = func() string {
	b, err := os.ReadFile("../bench/trace/testdata/six_requests.jsonl")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func writeTrace(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBenchTraceJSON(t *testing.T) {
	p := writeTrace(t, sixLineTrace)
	var out bytes.Buffer
	code, err := Run(context.Background(), []string{"bench", "trace", "--trace", p, "--capacities", "inf,4,1000",
		"--instances", "2", "--capacity", "3", "--json"}, &out, io.Discard)
	if err != nil || code != 0 {
		t.Fatalf("exit %d: %v", code, err)
	}
	var rows []map[string]any
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	// trace, 5 policies x 3 capacities, Belady x 3, the class ceiling x 3,
	// 4 routers + 2 events-fed.
	if len(rows) != 1+5*3+3+3+4+2 {
		t.Fatalf("%d rows: %v", len(rows), rows)
	}
	// The events-fed routers reach their bookkeeping twins' hit rates.
	for i, name := range []string{"cache-aware", "conductor"} {
		own, ev := rows[22+2+i], rows[26+i]
		if own["router"] != name || ev["router"] != name+" (kv events)" || own["hit_rate"] != ev["hit_rate"] {
			t.Fatalf("%s: %v vs %v", name, own, ev)
		}
	}
	for i, r := range rows[19:22] {
		if r["kind"] != "ceiling" || r["policy"] != "ClassCeiling" || (i == 0 && r["hits"].(float64) != 9) {
			t.Fatalf("ceiling row %d: %v", i, r)
		}
	}
	tr := rows[0]
	if tr["kind"] != "trace" || tr["requests"].(float64) != 6 || tr["ideal_hits"].(float64) != 9 || tr["ideal_hit_rate"].(float64) != 9.0/16 ||
		tr["length_mismatch"].(float64) != 0 || tr["distinct_blocks"].(float64) != 7 {
		t.Fatalf("trace row %v", tr)
	}
	wantHits := map[string]float64{"LRU/0": 9, "LFU/0": 9, "LengthAware/0": 9, "LRU/4": 6, "LFU/4": 7, "LengthAware/4": 8,
		"TailFirst/0": 9, "TailFirst/4": 8, "Retention/0": 9, "Retention/4": 8}
	for _, r := range rows[1:16] {
		if r["kind"] != "cache" {
			t.Fatalf("row %v", r)
		}
		key := fmt.Sprintf("%s/%v", r["policy"], r["capacity"])
		if want, ok := wantHits[key]; ok && r["hits"].(float64) != want {
			t.Errorf("%s: hits %v, want %v", key, r["hits"], want)
		}
		if key == "TailFirst/4" && r["ratio_to_lru"].(float64) != 8.0/6 {
			t.Errorf("TailFirst vs LRU at 4 blocks: %v, want %v", r["ratio_to_lru"], 8.0/6)
		}
		if r["capacity"].(float64) == 0 {
			paper, hasPaper := r["paper_arxiv_hit_rate"].(float64)
			if r["unlimited"] != true || r["ratio_to_ideal"].(float64) != 1 || r["ratio_to_lru"].(float64) != 1 ||
				(r["policy"] != "TailFirst" && r["policy"] != "Retention") != (hasPaper && paper == 0.51) {
				t.Errorf("unlimited row %v", r)
			}
		}
		if r["capacity"].(float64) == 4 {
			if _, ok := r["paper_arxiv_hit_rate"]; ok {
				t.Errorf("paper figure for a capacity the paper lacks: %v", r)
			}
		}
	}
	// Belady per capacity: the ideal when unlimited, at or above every
	// policy; every policy row carries it and its share of the gap.
	opt := map[float64]float64{}
	for _, r := range rows[16:19] {
		if r["kind"] != "optimum" || r["policy"] != "Belady" {
			t.Fatalf("row %v", r)
		}
		opt[r["capacity"].(float64)] = r["hits"].(float64)
	}
	if opt[0] != 9 || opt[4] < 8 {
		t.Fatalf("optimum hits %v", opt)
	}
	for _, r := range rows[1:16] {
		if r["hits"].(float64) > opt[r["capacity"].(float64)] || r["optimum_hit_rate"].(float64)*16 != opt[r["capacity"].(float64)] {
			t.Errorf("row %v above or without the optimum %v", r, opt)
		}
		if r["policy"] == "LRU" && r["share_of_gap"].(float64) != 0 {
			t.Errorf("LRU's share of the gap %v", r["share_of_gap"])
		}
	}
	routers := map[string]bool{}
	for _, r := range rows[22:] {
		if r["kind"] != "route" || r["requests"].(float64) != 6 || r["slo_fraction"].(float64) != 1 || r["instances"].(float64) != 2 ||
			r["instance_policy"] != "LRU" {
			t.Errorf("route row %v", r)
		}
		routers[r["router"].(string)] = true
	}
	if len(routers) != 6 || !routers["conductor"] || !routers["round-robin"] || !routers["conductor (kv events)"] {
		t.Fatalf("routers %v", routers)
	}
}

func TestBenchTraceText(t *testing.T) {
	p := writeTrace(t, sixLineTrace)
	var out bytes.Buffer
	code, err := Run(context.Background(), []string{"bench", "trace", "--trace", p, "--limit", "3", "--reject", "--slo", "1ms"}, &out, io.Discard)
	if err != nil || code != 0 {
		t.Fatalf("exit %d: %v", code, err)
	}
	s := out.String()
	for _, want := range []string{"3 requests, 7 blocks", "ideal hit ratio (unlimited pool, computed directly): 0.2857",
		"LengthAware       Inf", "Retention         Inf", "Belady (offline)  Inf", "vs LRU", "of gap", "conductor", "early rejection on"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

// TestBenchTraceSyntheticAgent: --synthetic agent replays a generated
// tool-agent trace (its first 300 requests here) with Retention in the
// routing instances.
func TestBenchTraceSyntheticAgent(t *testing.T) {
	var out bytes.Buffer
	code, err := Run(context.Background(), []string{"bench", "trace", "--synthetic", "agent", "--limit", "300", "--capacities", "200",
		"--instance-policy", "retention", "--capacity", "500"}, &out, io.Discard)
	if err != nil || code != 0 {
		t.Fatalf("exit %d: %v", code, err)
	}
	for _, want := range []string{"synthetic agent trace (seed 1): 300 requests", "Retention         200", "Retention 500 blocks each"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBenchTraceErrors(t *testing.T) {
	good := writeTrace(t, sixLineTrace)
	bad := writeTrace(t, sixLineTrace[:100]+"\n{oops}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", filepath.Join(t.TempDir(), "none.jsonl")}, "--trace"},
		{[]string{"--trace", bad}, "line 2"},
		{[]string{"--trace", good, "--capacities", "inf,0"}, "--capacities"},
		{[]string{"--trace", good, "--instances", "0"}, "instances"},
		{[]string{"--trace", good, "--bandwidth", "0"}, "bandwidth"},
		{[]string{"--trace", good, "--limit", "-1"}, "--limit"},
		{[]string{"--trace", writeTrace(t, "\n")}, "no requests"},
		{[]string{"--trace", good, "--instance-policy", "belady"}, "--instance-policy"},
		{[]string{"--synthetic", "chat"}, "--synthetic"},
		{[]string{"--synthetic", "agent", "--trace", good}, "exclude"},
	} {
		code, err := Run(context.Background(), append([]string{"bench", "trace"}, tc.args...), io.Discard, io.Discard)
		if code == 0 || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: exit %d, err %v, want %q", tc.args, code, err, tc.want)
		}
	}
}
