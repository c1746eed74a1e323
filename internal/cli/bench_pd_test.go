package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

func TestBenchPDBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--link-rate", "fast"},
		{"--link-rate", "-1Mbit"},
		{"--sizes", "1"},
	} {
		code, err := Run(context.Background(), append([]string{"bench", "pd", "--model", "tiny"}, args...), io.Discard, io.Discard)
		if code != 2 || err == nil {
			t.Errorf("%s: code %d err %v, want 2", strings.Join(args, " "), code, err)
		}
	}
}

// A tiny run on a limited link prints both transfer modes and the share
// of the transfer hidden.
func TestBenchPDLinkRate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	code, err := Run(ctx, []string{"bench", "pd", "--model", "tiny", "--sizes", "384", "--requests", "1", "--output-tokens", "2", "--link-rate", "2Mbit"}, &out, io.Discard)
	if code != 0 || err != nil {
		t.Fatalf("code %d err %v\n%s", code, err, out.String())
	}
	for _, want := range []string{"P/D link: 2.5e+05 bytes/s", "384 whole", "384 layer", "hidden (tail)", "TTFT layer/whole"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in\n%s", want, out.String())
		}
	}
}

// --tp-pairs without --model runs wide-kv and says how big a transfer is;
// a pair's row names its MiB per transfer and ratio to the engine.
func TestBenchPDPairsDefaultModel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var out bytes.Buffer
	code, err := Run(ctx, []string{"bench", "pd", "--tp-pairs", "1:2", "--tp-modes", "whole", "--sizes", "32", "--requests", "1", "--output-tokens", "2"}, &out, io.Discard)
	if code != 0 || err != nil {
		t.Fatalf("code %d err %v\n%s", code, err, out.String())
	}
	for _, want := range []string{"model wide-kv (4 layers, 8 KV heads x 128, 32768 KV bytes/token), 32-token prompts: 1.00 MiB of KV per transfer",
		"MiB/xfer", "1 -> 2   whole       1.00       4"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in\n%s", want, out.String())
		}
	}
}
