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

	"github.com/spf13/pflag"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/syncbuf"
)

// TestMasterGflagsParse: Mooncake's master command line sets our settings
// (both --flag=value and --flag value; booleans bare or =true), rpc_port 0
// keeps --port, and flags without effect are named in a warning.
func TestMasterGflagsParse(t *testing.T) {
	var (
		g        masterGflags
		core     master.Config
		ha       haFlags
		events   masterEventFlags
		host     = "127.0.0.1"
		port     = 50051
		httpPort = 9003
		strategy = "random"
		verbose  bool
	)
	f := pflag.NewFlagSet("master", pflag.ContinueOnError)
	registerMooncakeMasterFlags(f, &core)
	g.register(f, &host, &port, &httpPort, &strategy, &core, &ha)
	err := f.Parse([]string{"--enable_http_metadata_server=true", "--http_metadata_server_port", "8099",
		"--default_kv_lease_ttl=500", "--eviction_high_watermark_ratio=0.95", "--cluster_id=mc_ci",
		"--rpc_port=0", "--rpc_address", "0.0.0.0", "--metrics_port=9100", "--allocation_strategy=free_ratio_first",
		"--default_kv_soft_pin_ttl=1m", "--put_start_discard_timeout_sec=40", "--enable_ha", "--etcd_endpoints=h1:2379;h2:2379",
		"--max_threads", "4", "--enable_offload=true", "--root_fs_dir=/tmp/x", "--v=1",
		"--enable_kv_events", "--kv_events_bind_endpoint=tcp://*:5557"})
	if err != nil {
		t.Fatal(err)
	}
	var warn strings.Builder
	if err := g.apply(&warn, &verbose, &events, &masterSecurityFlags{}); err != nil {
		t.Fatal(err)
	}
	if port != 50051 || host != "0.0.0.0" || httpPort != 9100 || strategy != "free_ratio_first" {
		t.Errorf("port %d host %s http %d strategy %s", port, host, httpPort, strategy)
	}
	if core.LeaseTTL != 500*time.Millisecond || core.HighWatermark != 0.95 || core.SoftPinTTL != time.Minute || core.PutTimeout != 40*time.Second {
		t.Errorf("core %+v", core)
	}
	if !ha.enabled || ha.etcd != "h1:2379;h2:2379" || ha.cluster != "mc_ci" || !verbose || events.endpoint != "tcp://*:5557" {
		t.Errorf("ha %+v verbose %v events %q", ha, verbose, events.endpoint)
	}
	if !g.metaEnable || g.metaPort != 8099 || g.metaHost != "0.0.0.0" {
		t.Errorf("metadata server %v %d %s", g.metaEnable, g.metaPort, g.metaHost)
	}
	w := warn.String()
	for _, want := range []string{"--enable_offload=true accepted and ignored: the disk tier belongs to the storage node",
		"--max_threads=4 accepted and ignored", "--root_fs_dir=/tmp/x accepted and ignored"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
	if strings.Contains(w, "cluster_id") || strings.Contains(w, "lease") {
		t.Errorf("warned about a flag that has effect: %q", w)
	}
	if err := f.Parse([]string{"--rpc_port=50100"}); err != nil || port != 50100 {
		t.Errorf("--rpc_port=50100: port %d, %v", port, err)
	}
	if err := f.Parse([]string{"--rpc_port=x"}); err == nil {
		t.Error("--rpc_port=x accepted")
	}
}

// TestMasterGflagsRefused: what cannot run is refused with exit code 2.
func TestMasterGflagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"master", "--ha_backend_type=redis"},
		{"master", "--enable_kv_events"},
		{"master", "--enable_http_metadata_server", "--http_metadata_server_port=70000"},
	} {
		var stderr strings.Builder
		code, err := Run(context.Background(), args, io.Discard, &stderr)
		if code != 2 || err == nil {
			t.Errorf("%v: exit %d, %v", args, code, err)
		}
	}
}

// TestMasterGflagsCommand: `mooncake master` with the command line of
// Mooncake's CI serves the embedded HTTP metadata server (/health and the
// /metadata contract) beside the master, and warns about ignored flags.
func TestMasterGflagsCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr syncbuf.Buffer
	done := make(chan error, 1)
	args := []string{"master", "--enable_http_metadata_server=true", "--http_metadata_server_port=0",
		"--http_metadata_server_host=127.0.0.1", "--default_kv_lease_ttl=500", "--eviction_high_watermark_ratio=0.95",
		"--cluster_id=mc_ci", "--port=0", "--metrics_port=0", "--max_threads=4"}
	go func() {
		_, err := Run(ctx, args, pw, &stderr)
		pw.Close()
		done <- err
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("master: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("master did not stop")
		}
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, pr)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("master printed nothing")
	}
	m := regexp.MustCompile(`http=(\S+) metadata=(http://\S+)/metadata`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("listening line %q", line)
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(m[2] + "/health"); code != 200 || body != "OK" {
		t.Errorf("metadata /health: %d %q", code, body)
	}
	req, _ := http.NewRequest(http.MethodPut, m[2]+"/metadata?key=mooncake/ram/a", strings.NewReader(`{"x":1}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT metadata: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, body := get(m[2] + "/metadata?key=mooncake/ram/a"); code != 200 || body != `{"x":1}` {
		t.Errorf("GET metadata: %d %q", code, body)
	}
	if code, _ := get("http://" + m[1] + "/health"); code != 200 {
		t.Errorf("master /health: %d", code)
	}
	if !strings.Contains(stderr.String(), "--max_threads=4 accepted and ignored") {
		t.Errorf("no warning for --max_threads in %q", stderr.String())
	}
}
