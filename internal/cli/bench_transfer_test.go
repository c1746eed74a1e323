package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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
