package store

import (
	"math"
	"testing"
	"time"
)

func TestRatios(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	odd := Ratios{1.2, 0.8, 1.0, 0.9, 5}
	if m := odd.Median(); !near(m, 1.0) {
		t.Fatalf("median of %v = %v, want 1.0", odd, m)
	}
	if q1, q3 := odd.Quartiles(); !near(q1, 0.9) || !near(q3, 1.2) {
		t.Fatalf("quartiles of %v = %v %v, want 0.9 1.2", odd, q1, q3)
	}
	even := Ratios{0.9, 1.1, 1.0, 0.7}
	if m := even.Median(); !near(m, 0.95) {
		t.Fatalf("median of %v = %v, want 0.95", even, m)
	}
	// Ratios of rounds that measured nothing are no figure.
	if m := (Ratios{0, math.Inf(1), math.NaN(), 2}).Median(); m != 2 {
		t.Fatalf("median = %v, want 2", m)
	}
	if m := (Ratios{}).Median(); m != 0 {
		t.Fatalf("median of none = %v", m)
	}
}

// TestPairRatios: each round's on over off, in round order, whatever the
// medians of either side say.
func TestPairRatios(t *testing.T) {
	row := func(ops int, cpu time.Duration) Row {
		return Row{Ops: ops, Elapsed: time.Second, CPU: cpu * time.Duration(ops)}
	}
	// Round 2 of off hit a burst of other load: the side's median (100)
	// is paired with on's (95) only by the paired ratios' median.
	off := []Row{row(100, 10), row(101, 10), row(50, 20), row(99, 10), row(0, 0)}
	on := []Row{row(95, 11), row(96, 11), row(48, 22), row(94, 11), row(90, 11)}
	ops, cpu := pairRatios(off, on)
	if len(ops) != 4 || len(cpu) != 4 {
		t.Fatalf("%d ops and %d cpu ratios, want 4 (the empty round left out)", len(ops), len(cpu))
	}
	if !(math.Abs(ops[0]-0.95) < 1e-9 && math.Abs(ops[2]-0.96) < 1e-9) {
		t.Fatalf("ratios %v", ops)
	}
	if m := ops.Median(); m < 0.949 || m > 0.96 {
		t.Fatalf("paired median %v, want about 0.95", m)
	}
	if m := cpu.Median(); math.Abs(m-1.1) > 1e-9 {
		t.Fatalf("cpu paired median %v, want 1.1", m)
	}
}
