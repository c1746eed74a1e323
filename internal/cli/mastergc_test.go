package cli

import (
	"context"
	"runtime/debug"
	"testing"
)

// TestMasterGCPercent: about masterGCHeadroom of garbage between
// collections, within [masterGCMin, masterGCMax], small masters included;
// the runtime's default until the live heap is known.
func TestMasterGCPercent(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{{0, 100}, {512 << 10, 1600}, {1 << 20, 1600}, {4 << 20, 400}, {16 << 20, 100}, {32 << 20, 50}, {160 << 20, 10}, {320 << 20, 5}, {8 << 30, 5}} {
		if got := masterGCPercent(tc.live, false); got != tc.want {
			t.Errorf("live %d MiB: GOGC %d, want %d", tc.live>>20, got, tc.want)
		}
		if got, want := masterGCPercent(tc.live, true), max(tc.want, masterGCRestore); got != want && tc.live > 0 {
			t.Errorf("live %d MiB, restoring: GOGC %d, want %d", tc.live>>20, got, want)
		}
	}
}

// TestTuneMasterGC: the tuner sets the GOGC of the live heap unless GOGC is
// set, and returns when its context ends.
func TestTuneMasterGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		gogc string
		set  bool
	}{{"", true}, {"200", false}, {"off", false}} {
		debug.SetGCPercent(1000)
		tuneMasterGC(ctx, tc.gogc) // one setting, then the ended context returns
		got := debug.SetGCPercent(100)
		if tc.set && (got < masterGCMin || got > masterGCMax) {
			t.Errorf("GOGC=%q: GC percent %d, want one in [%d,%d]", tc.gogc, got, masterGCMin, masterGCMax)
		}
		if !tc.set && got != 1000 {
			t.Errorf("GOGC=%q: GC percent changed to %d", tc.gogc, got)
		}
	}
}
