package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func tinyModel(t testing.TB) *model.Model {
	t.Helper()
	m, err := model.NewBuiltin("tiny", 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type completion struct {
	Code     int
	Text     string
	TokenIDs []int
	Finish   string
	KV       map[string]any
	Raw      string
}

// complete sends a greedy completion and parses the answer (JSON or SSE).
func complete(t testing.TB, ctx context.Context, base, prompt string, maxTokens int, stream bool) completion {
	t.Helper()
	return completeKV(t, ctx, base, prompt, maxTokens, stream, nil)
}

// completeKV is complete with kv_transfer_params (sent straight to an engine).
func completeKV(t testing.TB, ctx context.Context, base, prompt string, maxTokens int, stream bool, kv map[string]any) completion {
	t.Helper()
	m := map[string]any{"prompt": prompt, "max_tokens": maxTokens, "temperature": 0,
		"stream": stream, "return_token_ids": true, "ignore_eos": true}
	if kv != nil {
		m["kv_transfer_params"] = kv
	}
	body, _ := json.Marshal(m)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil { // the caller cancelled: not a failure
			return completion{Raw: err.Error()}
		}
		t.Errorf("POST %s: %v", base, err)
		return completion{Raw: err.Error()}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	c := completion{Code: resp.StatusCode, Raw: string(raw)}
	if err != nil {
		return c
	}
	if resp.StatusCode != 200 {
		return c
	}
	c.parse(raw, stream, t.Errorf)
	return c
}

// parse folds a completions or chat answer into c: one JSON object, or SSE
// "data:" lines when sse. report gets each object that does not decode.
func (c *completion) parse(raw []byte, sse bool, report func(format string, args ...any)) {
	type choice struct {
		Text         string  `json:"text"`
		TokenIDs     []int   `json:"token_ids"`
		FinishReason *string `json:"finish_reason"`
		Message      *struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Content string `json:"content"`
		} `json:"delta"`
	}
	type obj struct {
		Choices []choice       `json:"choices"`
		KV      map[string]any `json:"kv_transfer_params"`
	}
	add := func(o obj) {
		for _, ch := range o.Choices {
			c.Text += ch.Text
			if ch.Message != nil {
				c.Text += ch.Message.Content
			}
			if ch.Delta != nil {
				c.Text += ch.Delta.Content
			}
			c.TokenIDs = append(c.TokenIDs, ch.TokenIDs...)
			if ch.FinishReason != nil {
				c.Finish = *ch.FinishReason
			}
		}
		if o.KV != nil {
			c.KV = o.KV
		}
	}
	if !sse {
		var o obj
		if err := json.Unmarshal(raw, &o); err != nil {
			report("bad JSON %q: %v", raw, err)
		}
		add(o)
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") || line == "data: [DONE]" {
			continue
		}
		var o obj
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &o); err != nil {
			report("bad SSE line %q: %v", line, err)
		}
		add(o)
	}
}

// metricValue reads one sample (name with labels, exactly as exposed) from base/metrics.
func metricValue(t testing.TB, base, sample string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, sample+" ") {
			var v float64
			fmt.Sscan(strings.TrimPrefix(line, sample+" "), &v)
			return v
		}
	}
	t.Fatalf("metric %s not found at %s", sample, base)
	return 0
}

// assertNoLeaks waits until no instance holds blocks for a request or a
// transfer: blocks used 0, no delayed frees, nothing held by the connector.
func assertNoLeaks(t testing.TB, insts ...*cluster.Instance) {
	t.Helper()
	for _, in := range insts {
		waitfor.Cond(t, 15*time.Second, "no leaked blocks on "+in.Role+" "+in.URL, func() bool {
			s := in.Engine.Stats()
			ok := s.BlocksUsed == 0 && s.DelayedFree == 0 && s.Running == 0 && s.WaitingForRemote == 0
			if in.Conn != nil {
				cs := in.Conn.Stats()
				ok = ok && cs.Held == 0 && cs.PullsInFlight == 0
			}
			return ok
		})
		if v := metricValue(t, in.URL, "mooncake_engine_kv_blocks_used"); v != 0 {
			t.Fatalf("%s: metric kv blocks used = %v", in.URL, v)
		}
	}
}
