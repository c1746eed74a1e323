package masterserver

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/kvcache-go/mooncake/internal/httpjson"
	"github.com/kvcache-go/mooncake/internal/master"
)

// Mooncake's drain control plane on the admin HTTP API (master.CreateDrainJob):
//
//	POST /api/v1/drain_jobs  {"segments": [...], "target_segments": [...], "max_concurrency": N}
//	                         -> {"success": true, "job_id": ID}
//	GET  /api/v1/drain_jobs/query?job_id=ID
//	                         -> {"success": true, "status_name": "RUNNING"|"SUCCEEDED"|"FAILED",
//	                             "total_units", "active_units", "succeeded_units", "failed_units", ...}
//	GET  /api/v1/segments/status?segment=NAME
//	                         -> {"success": true, "status_name": "OK"|"DRAINING"|"DRAINED"|"FAILED"}
//
// Failures answer {"success": false, "error": msg} with 400 (bad request) or
// 404 (unknown job or segment).

// maxDrainRequest bounds a drain job request body.
const maxDrainRequest = 1 << 20

func mountDrain(mux *http.ServeMux, m *master.Master) {
	mux.HandleFunc("POST /api/v1/drain_jobs", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Segments       []string `json:"segments"`
			TargetSegments []string `json:"target_segments"`
			MaxConcurrency int      `json:"max_concurrency"`
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDrainRequest))
		if err == nil {
			err = json.Unmarshal(body, &req)
		}
		if err != nil {
			drainFail(w, http.StatusBadRequest, "invalid drain job request: "+err.Error())
			return
		}
		id, err := m.CreateDrainJob(req.Segments, req.TargetSegments, req.MaxConcurrency)
		if err != nil {
			drainFail(w, httpCode(err), err.Error())
			return
		}
		writeJSON(w, map[string]any{"success": true, "job_id": id})
	})
	mux.HandleFunc("GET /api/v1/drain_jobs/query", func(w http.ResponseWriter, r *http.Request) {
		j, err := m.DrainJobInfo(r.URL.Query().Get("job_id"))
		if err != nil {
			drainFail(w, http.StatusNotFound, err.Error())
			return
		}
		writeJSON(w, map[string]any{
			"success": true, "job_id": j.ID, "status": int(j.Status), "status_name": j.Status.String(),
			"segments": j.Segments, "target_segments": j.Targets, "max_concurrency": j.MaxConcurrency,
			"total_units": j.TotalUnits, "active_units": j.ActiveUnits, "succeeded_units": j.SucceededUnits,
			"failed_units": j.FailedUnits, "message": j.Message,
			"created_ms": j.Created.UnixMilli(), "updated_ms": j.Updated.UnixMilli(),
		})
	})
	mux.HandleFunc("GET /api/v1/segments/status", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("segment")
		st, err := m.SegmentDrainStatus(name)
		if err != nil {
			drainFail(w, httpCode(err), err.Error())
			return
		}
		writeJSON(w, map[string]any{"success": true, "segment": name, "status_name": st})
	})
}

func drainFail(w http.ResponseWriter, code int, msg string) {
	httpjson.Write(w, code, map[string]any{"success": false, "error": msg})
}
