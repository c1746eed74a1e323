package cli

import (
	"runtime/debug"
	"testing"
)

// TestSetMasterGC: the master runs at masterGCPercent unless GOGC is set.
func TestSetMasterGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	for _, tc := range []struct {
		gogc string
		want int
	}{{"", masterGCPercent}, {"200", 100}, {"off", 100}} {
		debug.SetGCPercent(100)
		setMasterGC(tc.gogc)
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("GOGC=%q: GC percent %d, want %d", tc.gogc, got, tc.want)
		}
	}
}
