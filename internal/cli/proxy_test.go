package cli

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestProxyConductorFlags(t *testing.T) {
	insts := []string{"--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:2", "--port", "0"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"negative slo", []string{"--policy", "conductor", "--ttft-slo", "-1s"}, "negative TTFT SLO"},
		{"slo needs conductor", []string{"--ttft-slo", "30s"}, "needs the conductor"},
		{"conductor on decode", []string{"--decode-policy", "conductor"}, "prefill only"},
		{"negative cost", []string{"--policy", "conductor", "--cost-per-token", "-1"}, "cost model"},
		{"unknown protocol", []string{"--protocol", "nixl"}, "unknown protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, err := Run(context.Background(), append(append([]string{"proxy"}, insts...), tc.args...), io.Discard, io.Discard)
			if code == 0 || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("code %d err %v, want an error containing %q", code, err, tc.want)
			}
		})
	}

	line, stop := startCmd(t, "proxy", "--port", "0", "--policy", "conductor", "--ttft-slo", "30s",
		"--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:2", "--cost-fixed", "0.02")
	defer stop()
	_, rest, ok := strings.Cut(line, "http://")
	if !ok {
		t.Fatalf("first line %q", line)
	}
	base := "http://" + strings.Fields(rest)[0]
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`mooncake_proxy_instance_queued_prefill_seconds{instance="http://127.0.0.1:1",role="prefill"} 0`, "mooncake_proxy_ttft_slo_rejected_total 0"} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("metrics lack %q:\n%s", want, b)
		}
	}
}
