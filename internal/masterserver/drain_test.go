package masterserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvcache-go/mooncake/internal/master"
)

// The drain HTTP API: create a job, follow it to SUCCEEDED as the source's
// client runs the moves, and the segment's status; bad requests answer
// success=false with 400/404 and the API keeps serving.
func TestDrainHTTP(t *testing.T) {
	m, err := master.New(master.Config{}, newFakeClock())
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b"} {
		if err := m.MountSegment("client-"+name, master.SegmentSpec{Name: name, Endpoint: "ep-" + name, Base: uint64(i+1) << 30, Size: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"k1", "k2"} {
		if _, err := m.PutStart("writer", k, 1000, master.ReplicateConfig{PreferredSegments: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
		if err := m.PutEnd("writer", k, 1); err != nil {
			t.Fatal(err)
		}
	}
	h := AdminHandler(m)
	call := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: %d %q", method, path, rec.Code, rec.Body.String())
		}
		return rec.Code, out
	}
	for _, bad := range []struct {
		body string
		code int
	}{
		{"{", http.StatusBadRequest},
		{`{"segments": []}`, http.StatusBadRequest},
		{`{"segments": ["zz"]}`, http.StatusNotFound},
	} {
		if code, out := call(http.MethodPost, "/api/v1/drain_jobs", bad.body); code != bad.code || out["success"] != false {
			t.Fatalf("POST %s: %d %v", bad.body, code, out)
		}
	}
	if code, out := call(http.MethodGet, "/api/v1/drain_jobs/query?job_id=nope", ""); code != http.StatusNotFound || out["success"] != false {
		t.Fatalf("unknown job: %d %v", code, out)
	}
	if code, _ := call(http.MethodGet, "/api/v1/segments/status?segment=zz", ""); code != http.StatusNotFound {
		t.Fatalf("unknown segment: %d", code)
	}
	code, out := call(http.MethodPost, "/api/v1/drain_jobs", `{"segments": ["a"], "target_segments": ["b"], "max_concurrency": 2}`)
	if code != http.StatusOK || out["success"] != true {
		t.Fatalf("create: %d %v", code, out)
	}
	id := out["job_id"].(string)
	if _, st := call(http.MethodGet, "/api/v1/segments/status?segment=a", ""); st["status_name"] != "DRAINING" {
		t.Fatalf("segment status %v", st)
	}
	as := m.FetchTasks("client-a", 8)
	if len(as) != 2 {
		t.Fatalf("assignments %+v", as)
	}
	for _, a := range as {
		if err := m.FinishTask("client-a", a.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	_, j := call(http.MethodGet, "/api/v1/drain_jobs/query?job_id="+id, "")
	if j["status_name"] != "SUCCEEDED" || j["succeeded_units"] != 2.0 || j["active_units"] != 0.0 || j["total_units"] != 2.0 {
		t.Fatalf("job %v", j)
	}
	if _, st := call(http.MethodGet, "/api/v1/segments/status?segment=a", ""); st["status_name"] != "DRAINED" {
		t.Fatalf("segment status %v", st)
	}
}

// Any body of a drain job request is answered 200 or 4xx, never a panic or 5xx.
func FuzzDrainRequest(f *testing.F) {
	for _, seed := range []string{`{"segments":["a"],"target_segments":["b"],"max_concurrency":1}`, `{`, `[]`,
		`{"segments":["a","a"],"target_segments":[]}`, `{"segments":null,"max_concurrency":-5}`, ""} {
		f.Add(seed)
	}
	m, err := master.New(master.Config{}, newFakeClock())
	if err != nil {
		f.Fatal(err)
	}
	for i, name := range []string{"a", "b"} {
		if err := m.MountSegment("client-"+name, master.SegmentSpec{Name: name, Endpoint: "ep-" + name, Base: uint64(i+1) << 30, Size: 1 << 20}); err != nil {
			f.Fatal(err)
		}
	}
	h := AdminHandler(m)
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/drain_jobs", strings.NewReader(body)))
		if rec.Code >= 500 {
			t.Fatalf("%q: %d %s", body, rec.Code, rec.Body.String())
		}
	})
}
