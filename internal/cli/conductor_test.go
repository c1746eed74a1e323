package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConductorCommand(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"kvevent_instance": {"x": {"endpoint": "tcp://127.0.0.1:1", "type": "vLLM", "modelname": "m", "block_size": 0}}}`), 0o644)
	if code, err := Run(context.Background(), []string{"conductor", "--port", "0", "--config", bad}, io.Discard, io.Discard); code != 2 || err == nil || !strings.Contains(err.Error(), "block_size") {
		t.Fatalf("bad config: %d %v", code, err)
	}
	good := filepath.Join(dir, "conductor_config.json")
	os.WriteFile(good, []byte(`{"http_server_port": 13333, "kvevent_instance": {"vllm-prefill-node1": {"endpoint": "tcp://127.0.0.1:1",
		"type": "vLLM", "modelname": "qwen2.5", "tenant_id": "default", "instance_id": "vllm-prefill-node1", "block_size": 128, "dp_rank": 0}}}`), 0o644)
	line, stop := startCmd(t, "conductor", "--port", "0", "--config", good)
	defer stop()
	_, rest, ok := strings.Cut(line, "http://")
	if !ok || !strings.Contains(line, "(1 publishers)") {
		t.Fatalf("first line %q", line)
	}
	resp, err := http.Get("http://" + strings.Fields(rest)[0] + "/registrations")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Count int `json:"count"`
		Regs  []struct {
			Key  string `json:"key"`
			Type string `json:"type"`
		} `json:"registrations"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.Count != 1 || got.Regs[0].Key != "vllm-prefill-node1|default|0" || got.Regs[0].Type != "vLLM" {
		t.Fatalf("registrations: %+v %v", got, err)
	}
}
