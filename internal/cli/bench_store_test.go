package cli

import (
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	benchstore "github.com/kvcache-go/mooncake/internal/bench/store"
)

// TestBenchStoreSmoke runs the bench with the smallest configuration and
// checks that every phase produced figures without errors.
func TestBenchStoreSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	var out bytes.Buffer
	err := runBenchStore(t.Context(), &out, benchstore.Config{Sizes: []int{4096}, Clients: []int{1, 2},
		SegmentSize: 8 << 20, Nodes: 2, Duration: 30 * time.Millisecond, Rounds: 1, Redis: "auto", Transport: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	rows := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 10 {
			rows[f[0]+" "+f[1]] = true
		}
	}
	for _, want := range []string{"mooncake put", "mooncake get", "mooncake get-into", "mooncake exist"} {
		if !rows[want] {
			t.Fatalf("bench output lacks a %q row:\n%s", want, text)
		}
	}
	for _, want := range []string{"memcpy", "segment utilisation before first eviction"} {
		if !strings.Contains(text, want) {
			t.Fatalf("bench output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "first error") {
		t.Fatalf("bench reported errors:\n%s", text)
	}
	_, errServer := exec.LookPath("redis-server")
	_, errBench := exec.LookPath("redis-benchmark")
	if errServer == nil && errBench == nil {
		for _, want := range []string{"redis put", "redis get", "redis batch-put", "redis batch-get", "redis exist"} {
			if !rows[want] {
				t.Fatalf("redis installed but %q not benchmarked:\n%s", want, text)
			}
		}
		if !strings.Contains(text, "get 4.0 KiB x2: GB/s") || !strings.Contains(text, "exist (1000 keys per call) x2: keys/s") {
			t.Fatalf("no mooncake vs redis ratio:\n%s", text)
		}
	}
}

// TestBenchStoreSeparateProcesses runs the bench with --servers both: the
// master and storage nodes also as their own processes of the real binary,
// rows "mooncake-proc" next to "mooncake", with a ratio line for each.
func TestBenchStoreSeparateProcesses(t *testing.T) {
	bin := buildBinary(t)
	var out bytes.Buffer
	err := runBenchStore(t.Context(), &out, benchstore.Config{Sizes: []int{4096}, Clients: []int{2},
		SegmentSize: 8 << 20, Nodes: 1, Duration: 30 * time.Millisecond, Rounds: 1, Redis: "off", Transport: "auto",
		Servers: benchstore.ServersBoth, Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	rows := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 10 {
			rows[f[0]+" "+f[1]] = true
		}
	}
	for _, want := range []string{"mooncake put", "mooncake get", "mooncake-proc put", "mooncake-proc get", "mooncake-proc exist"} {
		if !rows[want] {
			t.Fatalf("bench output lacks a %q row:\n%s", want, text)
		}
	}
	if strings.Contains(text, "first error") {
		t.Fatalf("bench reported errors:\n%s", text)
	}
	if err := (benchstore.Config{Sizes: []int{1}, Clients: []int{1}, SegmentSize: 1, Nodes: 1, Duration: 1, Rounds: 1, Servers: "elsewhere"}).Validate(); err == nil {
		t.Fatal("--servers elsewhere accepted")
	}
}

// TestBenchStoreClientProcesses runs the bench with --client-procs: each
// client its own process of the real binary (rows "mooncake-cproc"), and,
// where Redis is installed, Redis by as many redis-benchmark processes
// (rows "redis-cproc"), with ratios and CPU per key against both.
func TestBenchStoreClientProcesses(t *testing.T) {
	bin := buildBinary(t)
	redis := "off"
	_, e1 := exec.LookPath("redis-server")
	_, e2 := exec.LookPath("redis-benchmark")
	if e1 == nil && e2 == nil {
		redis = "auto"
	}
	var out bytes.Buffer
	err := runBenchStore(t.Context(), &out, benchstore.Config{Sizes: []int{4096}, Clients: []int{2},
		SegmentSize: 8 << 20, Nodes: 1, Duration: 30 * time.Millisecond, Rounds: 1, Redis: redis, Transport: "auto",
		Servers: benchstore.ServersProcess, ClientProcs: true, Binary: bin, Ops: []string{"put", "get"}})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	rows := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 10 && f[len(f)-1] == "0" { // errors column
			rows[f[0]+" "+f[1]] = true
		}
	}
	want := []string{"mooncake-cproc put", "mooncake-cproc get"}
	if redis == "auto" {
		want = append(want, "redis put", "redis-cproc put", "redis-cproc get")
		if !strings.Contains(text, "mooncake-cproc get 4.0 KiB x2 vs redis-cproc: GB/s") {
			t.Fatalf("bench output lacks the ratio to redis-cproc:\n%s", text)
		}
		// CPU time comes from /proc in 10 ms ticks: a 30 ms phase may count
		// none for a server, and then its row, and every ratio to it, is
		// left out. Where both rows of a pair have CPU, the ratio is printed.
		for _, peer := range []string{"redis", "redis-cproc"} {
			for _, op := range []string{"put", "get"} {
				cpuLine := func(sys string) *regexp.Regexp {
					return regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(sys) + ` ` + op + ` 4\.0 KiB x2: \S+ \(clients .*$`)
				}
				ours, theirs := cpuLine("mooncake-cproc").FindString(text), cpuLine(peer).FindString(text)
				if ours != "" && theirs != "" && !strings.Contains(ours, "x "+peer+"'s") {
					t.Fatalf("CPU per key of mooncake-cproc %s and %s known, ratio not printed:\n%s", op, peer, text)
				}
			}
		}
	} else {
		t.Log("redis-server or redis-benchmark not installed: the mooncake rows only")
	}
	for _, w := range want {
		if !rows[w] {
			t.Fatalf("bench output lacks an error-free %q row:\n%s", w, text)
		}
	}
	if strings.Contains(text, "first error") {
		t.Fatalf("bench reported errors:\n%s", text)
	}
	if err := (benchstore.Config{Sizes: []int{1}, Clients: []int{1}, SegmentSize: 1, Nodes: 1, Duration: 1, Rounds: 1, ClientProcs: true}).Validate(); err == nil {
		t.Fatal("--client-procs accepted without separate-process servers")
	}
}
