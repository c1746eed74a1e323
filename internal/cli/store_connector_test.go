package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/storenode"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

func TestParseStoreConnectorConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		json string
		ok   bool
		want func(storeConnectorConfig) bool
	}{
		{"defaults", `{"master":"127.0.0.1:50051"}`, true, func(c storeConnectorConfig) bool { return c.Save && c.Load && !c.Layerwise && c.Replicas == 0 }},
		{"all keys", `{"master":"127.0.0.1:1","key_prefix":"x/","save":false,"load":true,"replicas":2,"lookup_timeout_ms":50,
			"load_timeout_s":1,"save_timeout_s":2,"save_queue":8,"local_buffer_mb":16,"transport":"tcp","layerwise":true}`, true,
			func(c storeConnectorConfig) bool {
				return !c.Save && c.Load && c.Layerwise && c.Replicas == 2 && c.KeyPrefix == "x/" && c.LookupTimeoutMS == 50 && c.SaveQueue == 8 && c.LocalBufferMB == 16
			}},
		{"no master", `{}`, false, nil},
		{"unknown key", `{"master":"a:1","bogus":1}`, false, nil},
		{"bad type", `{"master":"a:1","save":"yes"}`, false, nil},
		{"fractional int", `{"master":"a:1","replicas":1.5}`, false, nil},
		{"negative", `{"master":"a:1","save_queue":-1}`, false, nil},
		{"master not a string", `{"master":5}`, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal([]byte(tc.json), &m); err != nil {
				t.Fatal(err)
			}
			c, err := parseStoreConnectorConfig(m)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && !tc.want(c) {
				t.Fatalf("parsed %+v", c)
			}
		})
	}
}

func completeUsage(t *testing.T, url, prompt string) (string, int, int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": true, "return_token_ids": true})
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Choices []struct {
			TokenIDs []int `json:"token_ids"`
		} `json:"choices"`
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 || len(v.Choices) != 1 {
		t.Fatalf("status %d: %v %+v", resp.StatusCode, err, v)
	}
	return fmt.Sprint(v.Choices[0].TokenIDs), v.Usage.PromptTokens, v.Usage.PromptTokensDetails.CachedTokens
}

// TestServeStoreConnector: two `mooncake serve --kv-connector store`
// instances share a master and a storage node; the second one, with a cold
// local cache, gets the first one's prompt blocks from the store.
func TestServeStoreConnector(t *testing.T) {
	m, err := masterserver.Start(masterserver.ServerConfig{Addr: "127.0.0.1:0", TickInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := storenode.Start(ctx, storenode.Config{Master: m.Addr(), SegmentSize: 32 << 20,
		PingInterval: 50 * time.Millisecond, UnmountGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cfg := fmt.Sprintf(`{"master":%q,"local_buffer_mb":4}`, m.Addr())
	a := startServe(t, "--model", "tiny", "--kv-connector", "store", "--kv-connector-config", cfg)
	b := startServe(t, "--model", "tiny", "--kv-connector", "store", "--kv-connector-config", cfg)
	plain := startServe(t, "--model", "tiny")

	prompt := strings.Repeat("the store keeps prefix blocks for everyone. ", 5)
	want, _, _ := completeUsage(t, plain, prompt)
	gotA, ptoks, cachedA := completeUsage(t, a, prompt)
	if gotA != want || cachedA != 0 {
		t.Fatalf("A: %s (cached %d), want %s", gotA, cachedA, want)
	}
	// Wait for A's asynchronous saves: every full prompt block in the store.
	te, err := transfer.Open(ctx, transfer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer te.Close()
	cl, err := store.New(ctx, store.Config{Master: m.Addr(), Mover: te, LocalBufferSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var keys []store.KeyInfo
	var lerr error
	if !waitfor.Within(10*time.Second, func() bool {
		keys, _, lerr = cl.List(ctx, "mooncake/kv/", "", 1000)
		return lerr == nil && len(keys) == ptoks/16
	}) {
		t.Fatalf("store holds %d blocks (err %v), want %d", len(keys), lerr, ptoks/16)
	}
	gotB, _, cachedB := completeUsage(t, b, prompt)
	if gotB != want || cachedB != ptoks/16*16 && cachedB != ptoks-1 {
		t.Fatalf("B: %s (cached %d of %d), want %s with the store's blocks", gotB, cachedB, ptoks, want)
	}
	resp, err := http.Get(b + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("mooncake_store_kv_loaded_tokens_total %d\n", ptoks/16*16); !strings.Contains(string(metrics), want) {
		t.Fatalf("B /metrics lacks %q", want)
	}

	code, err := Run(context.Background(), []string{"serve", "--kv-connector", "store", "--kv-connector-config", `{"bogus":1}`}, io.Discard, io.Discard)
	if code != 2 || err == nil {
		t.Fatalf("bad store config: code %d err %v", code, err)
	}
}
