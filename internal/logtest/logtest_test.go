package logtest

import (
	"log/slog"
	"testing"
)

// TestRecorder: records at Min and above are kept with their attributes,
// lower ones are not.
func TestRecorder(t *testing.T) {
	r := &Recorder{}
	log := slog.New(r)
	log.Debug("hidden")
	log.Info("joined", "node", "a", "n", 3)
	log.Warn("slow", "ms", 7)
	if got := r.Messages(); len(got) != 2 || got[0] != "joined" || got[1] != "slow" {
		t.Fatalf("messages %q", got)
	}
	attrs, ok := r.Find(slog.LevelInfo, "joined")
	if !ok || attrs["node"].String() != "a" || attrs["n"].Int64() != 3 {
		t.Fatalf("find: %v %v", attrs, ok)
	}
	if _, ok := r.Find(slog.LevelWarn, "joined"); ok {
		t.Fatal("found a record at the wrong level")
	}
	if w := r.At(slog.LevelWarn); len(w) != 1 || w[0] != "slow ms=7" {
		t.Fatalf("warnings %q", w)
	}
}
