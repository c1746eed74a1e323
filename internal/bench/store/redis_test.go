package store

import (
	"context"
	"errors"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const sampleCSV = `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","43478.26","0.030","0.016","0.039","0.047","0.071","0.135"
"GET","inf","0.030","0.016","0.039","0.039","0.063","0.135"
`

func TestParseCSV(t *testing.T) {
	rows, err := parseCSV(strings.NewReader(sampleCSV))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0] != (csvRow{Test: "SET", RPS: 43478.26, P50ms: 0.039, P99ms: 0.071}) ||
		rows[1].Test != "GET" || !math.IsInf(rows[1].RPS, 1) || rows[1].P99ms != 0.063 {
		t.Fatalf("rows %+v", rows)
	}
	for name, in := range map[string]string{
		"empty":       "",
		"old version": "\"SET\",\"43478.26\"\n",
		"short line":  "\"test\",\"rps\",\"p50_latency_ms\",\"p99_latency_ms\"\n\"SET\",\"1\"\n",
		"bad number":  "\"test\",\"rps\",\"p50_latency_ms\",\"p99_latency_ms\"\n\"SET\",\"x\",\"1\",\"1\"\n",
		"negative":    "\"test\",\"rps\",\"p50_latency_ms\",\"p99_latency_ms\"\n\"SET\",\"1\",\"-1\",\"1\"\n",
		"nan":         "\"test\",\"rps\",\"p50_latency_ms\",\"p99_latency_ms\"\n\"SET\",\"NaN\",\"1\",\"1\"\n",
		"inf latency": "\"test\",\"rps\",\"p50_latency_ms\",\"p99_latency_ms\"\n\"SET\",\"1\",\"inf\",\"1\"\n",
		"bad quoting": "\"test\",\"rps\n",
	} {
		if _, err := parseCSV(strings.NewReader(in)); !errors.Is(err, errCSV) {
			t.Errorf("%s: %v, want errCSV", name, err)
		}
	}
}

// FuzzParseCSV: any output of the child process gives rows or errCSV,
// never a panic, and rows never hold a negative or NaN figure.
func FuzzParseCSV(f *testing.F) {
	f.Add([]byte(sampleCSV))
	f.Add([]byte("\"test\",\"rps\",\"p50_latency_ms\",\"p99_latency_ms\"\n\"SET\",\"1e308\",\"0\",\"0\"\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		rows, err := parseCSV(strings.NewReader(string(in)))
		if err != nil {
			if !errors.Is(err, errCSV) {
				t.Fatalf("error %v is not errCSV", err)
			}
			return
		}
		for _, r := range rows {
			if !(r.RPS >= 0) || !(r.P50ms >= 0) || !(r.P99ms >= 0) || math.IsInf(r.P50ms, 0) {
				t.Fatalf("row %+v", r)
			}
		}
	})
}

func TestCover(t *testing.T) {
	if cover(1) != 5 || cover(256) < 256*10 {
		t.Fatalf("cover(1)=%d cover(256)=%d", cover(1), cover(256))
	}
}

func TestRedisBenchmarkMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, mode := range []string{"auto", "127.0.0.1:6379"} {
		if _, _, err := startRedis(context.Background(), mode); !errors.Is(err, ErrRedisBenchmarkMissing) {
			t.Errorf("%s: %v", mode, err)
		}
	}
	if rb, stop, err := startRedis(context.Background(), "off"); rb != nil || stop != nil || err != nil {
		t.Fatalf("off: %v %v", rb, err)
	}
}

// TestRedisPhases runs each Redis phase once against a redis-server of
// this test (skipped when Redis or redis-benchmark is not installed).
func TestRedisPhases(t *testing.T) {
	for _, bin := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed", bin)
		}
	}
	ctx := t.Context()
	rb, stop, err := startRedis(ctx, "auto")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	set := redisSet{size: 4096, clients: 2, keys: 64}
	for _, op := range []string{"put", "batch-put", "get", "batch-get", "exist"} {
		r, rate, err := rb.phase(ctx, &set, op, 0, 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if r.System != "redis" || r.Op != op || r.Size != 4096 || r.Clients != 2 || r.Ops <= 0 || rate <= 0 ||
			r.GBps() <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Fatalf("%s: row %+v, rate %v", op, r, rate)
		}
	}
	if set.sets < cover(64) {
		t.Fatalf("%d SETs before the gets, want >= %d", set.sets, cover(64))
	}
	if err := rb.flushAll(ctx); err != nil {
		t.Fatal(err)
	}
	// A Redis that is not there: a clear error, not a hang.
	if _, _, err := startRedis(ctx, "127.0.0.1:1"); err == nil {
		t.Fatal("unreachable redis accepted")
	}
}
