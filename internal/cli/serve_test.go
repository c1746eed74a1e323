package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// startServe runs `mooncake serve` in process and returns its base URL.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	t.Cleanup(http.DefaultClient.CloseIdleConnections) // after the command stops
	line, _ := startCmd(t, append([]string{"serve", "--port", "0"}, args...)...)
	m := regexp.MustCompile(`http://\S+`).FindString(line)
	if m == "" {
		t.Fatalf("no address in %q", line)
	}
	waitfor.Cond(t, 30*time.Second, "/health to answer 200", func() bool {
		resp, err := http.Get(m + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return m
}

func complete(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"model init test","max_tokens":10,"temperature":0,"ignore_eos":true,"return_token_ids":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, v)
	}
	return fmt.Sprint(v["choices"].([]any)[0].(map[string]any)["token_ids"])
}

// TestModelInitAndServe: weights written by `model init` and loaded from the
// directory generate exactly what the in-memory built-in model generates.
func TestModelInitAndServe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny-model")
	if code, err := Run(context.Background(), []string{"model", "init", "--config", "tiny", "--seed", "1", "--out", dir}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("model init: %d %v", code, err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	fromDir := complete(t, startServe(t, "--model", dir, "--role", "producer", "--bootstrap-port", "0"))
	builtin := complete(t, startServe(t, "--model", "tiny", "--seed", "1"))
	if fromDir != builtin {
		t.Fatalf("directory model gave %s, built-in gave %s", fromDir, builtin)
	}
}

func TestServeRejectsBadFlags(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"gpt2"}`), 0o644)
	for _, args := range [][]string{
		{"serve", "--model", "huge"},
		{"serve", "--model", dir},
		{"serve", "--role", "observer"},
		{"serve", "--kv-connector", "nope"},
		{"serve", "--bootstrap-port", "9000"}, // role both: no connector
		{"serve", "--role", "producer", "--bootstrap-port", "70000"},
		{"model", "init", "--config", "medium", "--out", t.TempDir()},
		{"serve", "--tp", "4"}, // tiny has 2 KV heads
		{"up", "--model", "tiny", "--decode-tp", "3"},
	} {
		code, err := Run(context.Background(), args, io.Discard, io.Discard)
		if code == 0 || err == nil {
			t.Errorf("%v: accepted", args)
		}
		if slices.Contains(args, "--tp") && !strings.Contains(err.Error(), "must divide the 2 KV heads") {
			t.Errorf("%v: %v, want the reason", args, err)
		}
	}
}

// TestServeRoleFlags: --role producer alone starts the mooncake connector,
// --bootstrap-port puts its registry there, and the engine's /metrics
// shows the connector's metrics.
func TestServeRoleFlags(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	url := startServe(t, "--model", "tiny", "--role", "producer", "--bootstrap-port", strconv.Itoa(port))
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/query", port))
	if err != nil {
		t.Fatalf("bootstrap registry not on --bootstrap-port: %v", err)
	}
	var q map[string]any
	json.NewDecoder(resp.Body).Decode(&q)
	resp.Body.Close()
	if resp.StatusCode != 200 || q["engine_id"] == nil {
		t.Fatalf("/query %d %v", resp.StatusCode, q)
	}
	complete(t, url)
	for _, u := range []string{url, startServe(t, "--model", "tiny", "--role", "consumer")} {
		resp, err := http.Get(u + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, name := range []string{"mooncake_engine_kv_blocks_used", "mooncake_pd_"} {
			if !strings.Contains(string(b), name) {
				t.Errorf("%s/metrics lacks %s", u, name)
			}
		}
	}
}
