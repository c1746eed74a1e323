package master

import (
	"testing"
	"time"
)

// TestSummary: keys count memory objects and disk-only copies once,
// replicas and their bytes are per segment, leases end with their TTL,
// pins and unfinished puts are counted apart.
func TestSummary(t *testing.T) {
	m, clk := newTestMaster(t, Config{}, map[string]uint64{"a": 1 << 20, "b": 1 << 20})
	if err := m.MountSegment("client-d", SegmentSpec{Name: "d", Endpoint: "ep-d", Base: 9 << 30, Size: 1 << 20, DiskURL: "http://d"}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, m, "two", 1000, ReplicateConfig{Replicas: 2, PreferredSegments: []string{"a", "b"}})
	mustPut(t, m, "hard", 100, ReplicateConfig{HardPin: true, PreferredSegments: []string{"a"}})
	mustPut(t, m, "soft", 10, ReplicateConfig{SoftPin: true, PreferredSegments: []string{"b"}})
	if _, err := m.PutStart("writer", "pending", 50, ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetReplicaList("two"); err != nil {
		t.Fatal(err)
	}
	// A disk copy of a key not in memory, and one of a key that is.
	m.DiskSync("client-d", []HeldObject{{Segment: "d", Key: "cold", Size: 4096, Seq: 1, Disk: true},
		{Segment: "d", Key: "hard", Size: 100, Seq: 1 << 62, Disk: true}}, nil) // newer than the memory copy

	s := m.Summary()
	want := Summary{Keys: 4, Replicas: 4, ReplicaBytes: 2110, Leased: 1, HardPinned: 1, SoftPinned: 1}
	got := Summary{Keys: s.Keys, Replicas: s.Replicas, ReplicaBytes: s.ReplicaBytes, Leased: s.Leased, HardPinned: s.HardPinned, SoftPinned: s.SoftPinned}
	if got.Keys != want.Keys || got.Replicas != want.Replicas || got.ReplicaBytes != want.ReplicaBytes || got.Leased != want.Leased ||
		got.HardPinned != want.HardPinned || got.SoftPinned != want.SoftPinned {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
	if s.Stats.Objects != 3 || s.Stats.IncompleteObjects != 1 || s.Stats.Segments != 3 {
		t.Fatalf("stats %+v: want 3 objects, 1 pending put, 3 segments", s.Stats)
	}
	disk := map[string]SegmentSummary{}
	for _, g := range s.Segments {
		disk[g.Name] = g
	}
	if d := disk["d"]; len(s.Segments) != 3 || d.DiskObjects != 2 || d.DiskBytes != 4196 || s.DiskBytes != 4196 || disk["a"].DiskObjects != 0 {
		t.Fatalf("segments %+v: want the 2 disk copies (4196 bytes) on d", s.Segments)
	}

	clk.Advance(m.Config().LeaseTTL + time.Second)
	if s := m.Summary(); s.Leased != 0 {
		t.Fatalf("%d leased after the lease TTL", s.Leased)
	}

}
