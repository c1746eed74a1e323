package master

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// fakeSink records events as "stored KEY TIER" / "removed KEY TIER".
type fakeSink struct {
	mu     sync.Mutex
	events []string
}

func (f *fakeSink) Stored(key string, tier Tier) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprint("stored ", key, " ", tier))
}

func (f *fakeSink) Removed(key string, tier Tier) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprint("removed ", key, " ", tier))
}

func (f *fakeSink) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.events
	f.events = nil
	return out
}

// TestEventSink: objects becoming visible and going away, per tier, in
// order: put, upsert, remove, eviction with offload to disk, the disk copy's
// removal, a segment lost with its objects.
func TestEventSink(t *testing.T) {
	sink := &fakeSink{}
	m, err := New(Config{Durable: true, Events: sink, EvictionRatio: 0.5}, newFakeClock())
	if err != nil {
		t.Fatal(err)
	}
	spec := SegmentSpec{Name: "a", Endpoint: "ep-a", Base: 1 << 30, Size: 64 << 10, DiskURL: "http://a", OffloadOnEvict: true}
	if err := m.MountSegment("node", spec); err != nil {
		t.Fatal(err)
	}
	mustPut(t, m, "x", 1000, ReplicateConfig{})
	if _, err := m.PutStart("w", "unfinished", 1000, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Upsert("w", "x", 1000, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	m.PutEnd("w", "x", 1)
	m.Remove("x", false)
	mustPut(t, m, "y", 30000, ReplicateConfig{})
	if got, want := sink.take(), []string{"stored x CPU", "removed x CPU", "stored x CPU", "removed x CPU", "stored y CPU"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	m.Evict() // y goes to disk
	_, _, todo := m.Heartbeat("node", nil)
	var onDisk []HeldObject
	for _, r := range todo {
		if r.Offload {
			onDisk = append(onDisk, HeldObject{Segment: "a", Key: "y", Seq: r.Seq, Size: 30000, CRC: 42, Disk: true})
		}
	}
	m.DiskSync("node", onDisk, nil)
	m.Remove("y", false)
	mustPut(t, m, "z", 1000, ReplicateConfig{})
	m.UnmountSegment("node", "a")
	if got, want := sink.take(), []string{"removed y CPU", "stored y DISK", "removed y DISK", "stored z CPU", "removed z CPU"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}
