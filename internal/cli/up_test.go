package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestUpServesStreamedAnswer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, []string{"up", "--port", "0", "--model", "tiny", "--prefill", "1", "--decode", "2"}, pw, io.Discard)
		pw.Close()
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("up: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	}()
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		var all []string
		for sc.Scan() {
			all = append(all, sc.Text())
			if strings.HasPrefix(sc.Text(), "Health:") {
				first <- strings.Join(all, "\n")
			}
		}
		close(first)
	}()
	var out string
	select {
	case out = <-first:
	case <-time.After(60 * time.Second):
		t.Fatal("up did not report readiness")
	}
	url := regexp.MustCompile(`proxy on (http://\S+)`).FindStringSubmatch(out)
	if url == nil || !strings.Contains(out, "curl -N") || strings.Count(out, "decode-") != 2 {
		t.Fatalf("up output:\n%s", out)
	}
	resp, err := http.Get(url[1] + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health %d", resp.StatusCode)
	}
	resp, err = http.Post(url[1]+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"Once upon a time","max_tokens":5,"stream":true,"ignore_eos":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Count(string(b), "data: ") < 3 || !strings.Contains(string(b), "data: [DONE]") || !strings.Contains(string(b), `"kv_load":"remote"`) {
		t.Fatalf("stream %d:\n%s", resp.StatusCode, b)
	}
}

func TestMooncakeConnectorConfig(t *testing.T) {
	c, err := parseMooncakeConnectorConfig("producer", map[string]any{"bootstrap_port": 9000.0, "abort_timeout_s": 1.5, "engine_id": "e"})
	if err != nil || c.BootstrapPort != 9000 || c.AbortTimeoutS != 1.5 || c.EngineID != "e" {
		t.Fatalf("%+v %v", c, err)
	}
	// Defaults: a producer's registry on 8998, none for a consumer.
	if c, _ := parseMooncakeConnectorConfig("producer", nil); c.BootstrapPort != 8998 {
		t.Fatalf("producer default port %d", c.BootstrapPort)
	}
	if c, _ := parseMooncakeConnectorConfig("consumer", nil); c.BootstrapPort != 0 || !c.Layerwise {
		t.Fatalf("consumer default port %d, layerwise %v", c.BootstrapPort, c.Layerwise)
	}
	if c, err := parseMooncakeConnectorConfig("producer", map[string]any{"layerwise": false}); err != nil || c.Layerwise {
		t.Fatalf("layerwise false: %+v %v", c, err)
	}
	for _, bad := range []map[string]any{{"bootstrap_port": 1.5}, {"nope": 1.0}, {"engine_id": 3.0}, {"pull_timeout_s": -1.0}, {"layerwise": "yes"}} {
		if _, err := parseMooncakeConnectorConfig("producer", bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
