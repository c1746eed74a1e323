package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBenchTransferJSON runs `mooncake bench transfer` in process (inproc
// transport) and checks the JSON contract.
func TestBenchTransferJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	code, err := Run(ctx, []string{"bench", "transfer", "--transport", "inproc", "--op", "read", "--block-size", "64KiB",
		"--batch-size", "4", "--threads", "1", "--duration", "300ms", "--json"}, &out, io.Discard)
	if err != nil || code != 0 {
		t.Fatalf("exit %d: %v", code, err)
	}
	var r map[string]any
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("not one JSON object: %q: %v", out.String(), err)
	}
	for _, k := range []string{"transport", "op", "block_size", "batch_size", "threads", "seconds", "bytes", "gb_per_s",
		"ops_per_s", "p50_us", "p99_us", "baseline_gb_per_s", "ratio"} {
		if _, ok := r[k]; !ok {
			t.Errorf("missing field %q", k)
		}
	}
	if r["block_size"].(float64) != 65536 || r["transport"] != "inproc" || r["op"] != "read" || r["ratio"].(float64) <= 0 {
		t.Fatalf("result %v", r)
	}
}

func TestBenchTransferBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--block-size", "lots"},
		{"--transport", "rdma"},
		{"--op", "copy"},
		{"--mode", "both", "--transport", "inproc"},
	} {
		code, err := Run(context.Background(), append([]string{"bench", "transfer", "--duration", "100ms"}, args...), io.Discard, io.Discard)
		if code == 0 || err == nil {
			t.Errorf("%s: accepted", strings.Join(args, " "))
		}
	}
}

// TestBenchTransferGrantsBoth runs `mooncake bench transfer --grants both`
// (the real binary: its targets are processes of it) and checks that it
// measured both targets in every round and reports the paired ratio.
func TestBenchTransferGrantsBoth(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "bench", "transfer", "--grants", "both", "--rounds", "2", "--duration", "150ms",
		"--block-size", "64KiB", "--threads", "1", "--json").Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var r struct {
		Off, On      map[string]any
		Ratio        float64
		MediansRatio float64 `json:"medians_ratio"`
		Quartiles    []float64
		Rounds       int
		P50Ratio     float64 `json:"p50_ratio"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("not one JSON object: %q: %v", out, err)
	}
	if r.Rounds != 2 || r.Ratio <= 0 || r.MediansRatio <= 0 || r.P50Ratio <= 0 || len(r.Quartiles) != 2 ||
		r.Quartiles[0] > r.Ratio || r.Ratio > r.Quartiles[1] || r.Off["gb_per_s"].(float64) <= 0 || r.On["gb_per_s"].(float64) <= 0 {
		t.Fatalf("result %s", out)
	}
}
