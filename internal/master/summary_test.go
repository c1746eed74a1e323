package master

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestSummary: keys count memory objects and disk-only copies once,
// replicas and their bytes are per segment, leases end with their TTL,
// pins and unfinished puts are counted apart, and /api/summary says the
// same.
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

	rec := httptest.NewRecorder()
	AdminHandler(m).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/summary", nil))
	var j SummaryJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &j); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET /api/summary: %d %v %s", rec.Code, err, rec.Body)
	}
	if j.Keys != 4 || j.Replicas != 4 || j.Memory.Objects != 4 || j.Memory.Bytes != 2110 || j.Disk.Objects != 2 || j.Disk.Bytes != 4196 ||
		j.Objects != 3 || j.PendingPuts != 1 || j.Counters.Gets != 1 || j.Counters.Puts != 3 || len(j.SegmentList) != 3 ||
		!j.SegmentList[2].DiskTier || j.SegmentList[2].DiskObjects != 2 || j.Memory.Capacity != 3<<20 || j.Memory.Used == 0 ||
		j.TimeUnixMs != clk.Now().UnixMilli() {
		t.Fatalf("/api/summary %+v", j)
	}

	for path, want := range map[string]int{"/": http.StatusFound, "/dashboard/": http.StatusOK} {
		rec := httptest.NewRecorder()
		AdminHandler(m).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Fatalf("GET %s: %d, want %d", path, rec.Code, want)
		}
	}
}
