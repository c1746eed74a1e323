package soak_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/bench/soak"
	"github.com/kvcache-go/mooncake/internal/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// A 10-second soak on a real bed: no error, no leaked block, every
// process's RSS sampled in every interval.
func TestShortSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real processes")
	}
	bin := testbed.Binary(t) // skips without root or namespaces
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var seen int
	rep, err := soak.Run(ctx, soak.Config{Binary: bin, Duration: 10 * time.Second, Interval: 5 * time.Second, Workers: 2,
		OnInterval: func(soak.Interval) { seen++ }})
	if errors.Is(err, testbed.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors() != 0 || rep.Leaked != "" {
		t.Fatalf("errors %d (%v), leaked %q", rep.Errors(), rep.Examples, rep.Leaked)
	}
	if len(rep.Intervals) < 2 || seen != len(rep.Intervals) {
		t.Fatalf("%d intervals, %d reported", len(rep.Intervals), seen)
	}
	if rep.Verified == 0 || rep.Total.Kinds["ok"] == 0 {
		t.Fatalf("nothing done: %+v", rep.Total)
	}
	for _, iv := range rep.Intervals {
		if len(iv.RSS) != 9 || iv.Ops["completion"] == 0 || iv.TTFT.P50 <= 0 {
			t.Fatalf("interval %+v", iv)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := soak.Run(context.Background(), soak.Config{}); err == nil {
		t.Fatal("empty config accepted")
	}
}
