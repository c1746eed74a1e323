package transfer

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv("BENCH_TEST_TARGET") != "" {
		// Child: a target process like `mooncake bench transfer --mode target`.
		c := Config{Transport: os.Getenv("BENCH_TEST_TARGET"), Op: "write", BlockSize: 64 << 10, BatchSize: 4, Threads: 1, Duration: time.Second}
		if err := ServeTarget(context.Background(), c, os.Stdout, os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"4KiB": 4096, "1MiB": 1 << 20, "65536": 65536, "2GiB": 2 << 30, "4K": 4096, "1MB": 1000000, "512B": 512} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "KiB", "1.5MiB", "1TiB", "99999999999GiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Transport: "tcp", Op: "read", BlockSize: 4096, BatchSize: 2, Threads: 1, Duration: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"transport": func(c *Config) { c.Transport = "rdma" },
		"op":        func(c *Config) { c.Op = "copy" },
		"block":     func(c *Config) { c.BlockSize = 0 },
		"buffer":    func(c *Config) { c.BufferSize = 100 },
	} {
		c := ok
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestTwoProcesses runs the initiator against a target in a second process,
// as `mooncake bench transfer` does, for tcp and shm.
func TestTwoProcesses(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			t.Setenv("BENCH_TEST_TARGET", tr)
			info, stop, err := SpawnTarget(ctx, os.Args[0], []string{"-test.run=^$"})
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			os.Unsetenv("BENCH_TEST_TARGET")
			c := Config{Transport: tr, Op: "write", BlockSize: 64 << 10, BatchSize: 4, Threads: 1, Duration: 300 * time.Millisecond}
			r, err := RunInitiator(ctx, c, info)
			if err != nil {
				t.Fatal(err)
			}
			if r.Bytes <= 0 || r.GBPerS <= 0 || r.BaselineGBPerS <= 0 || r.Ratio <= 0 || r.P99us < r.P50us || r.ServedTransport != tr {
				t.Fatalf("result %+v", r)
			}
		})
	}
}

func TestInprocAndUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := Config{Transport: "inproc", Op: "read", BlockSize: 4096, BatchSize: 8, Threads: 2, Duration: 200 * time.Millisecond}
	tg, err := StartTarget(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	info, err := ParseLine(tg.Line())
	if err != nil {
		t.Fatal(err)
	}
	r, err := RunInitiator(ctx, c, info)
	if err != nil {
		t.Fatal(err)
	}
	if r.OpsPerS <= 0 || r.ServedTransport != "inproc" {
		t.Fatalf("result %+v", r)
	}
	lc := Config{Transport: "tcp", Op: "write", BlockSize: 4096, BatchSize: 1, Threads: 1, Duration: 300 * time.Millisecond, BufferSize: LargeSize + 4096}
	lt, err := StartTarget(ctx, lc)
	if err != nil {
		t.Fatal(err)
	}
	defer lt.Close()
	li, _ := ParseLine(lt.Line())
	lr, err := SmallDuringLarge(ctx, lc, li, 4096, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Samples == 0 || lr.P99us <= 0 || lr.StreamGBPerS <= 0 {
		t.Fatalf("load result %+v", lr)
	}
}
