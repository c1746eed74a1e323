package masterserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kvcache-go/mooncake/internal/master"
)

// TestSummaryJSON: GET /api/summary says what the core's Summary says, and
// the dashboard is served.
func TestSummaryJSON(t *testing.T) {
	clk := newFakeClock()
	m, err := master.New(master.Config{}, clk)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b"} {
		if err := m.MountSegment("client-"+name, master.SegmentSpec{Name: name, Endpoint: "ep-" + name, Base: uint64(i+1) << 30, Size: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.MountSegment("client-d", master.SegmentSpec{Name: "d", Endpoint: "ep-d", Base: 9 << 30, Size: 1 << 20, DiskURL: "http://d"}); err != nil {
		t.Fatal(err)
	}
	put := func(key string, size uint64, rc master.ReplicateConfig) {
		t.Helper()
		if _, err := m.PutStart("writer", key, size, rc); err != nil {
			t.Fatal(err)
		}
		if err := m.PutEnd("writer", key, 42); err != nil {
			t.Fatal(err)
		}
	}
	put("two", 1000, master.ReplicateConfig{Replicas: 2, PreferredSegments: []string{"a", "b"}})
	put("hard", 100, master.ReplicateConfig{HardPin: true, PreferredSegments: []string{"a"}})
	put("soft", 10, master.ReplicateConfig{SoftPin: true, PreferredSegments: []string{"b"}})
	if _, err := m.PutStart("writer", "pending", 50, master.ReplicateConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetReplicaList("two"); err != nil {
		t.Fatal(err)
	}
	m.DiskSync("client-d", []master.HeldObject{{Segment: "d", Key: "cold", Size: 4096, Seq: 1, Disk: true},
		{Segment: "d", Key: "hard", Size: 100, Seq: 1 << 62, Disk: true}}, nil)

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
