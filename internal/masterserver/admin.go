package masterserver

import (
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/master"
	"net/http"
	"runtime"
	"strconv"
	"strings"

	"github.com/kvcache-go/mooncake/internal/dashboard"
	"github.com/kvcache-go/mooncake/internal/httpjson"
)

// AdminHandler serves the master's admin HTTP API:
//
//	GET /health                       "OK"
//	GET /metrics                      Prometheus text format
//	GET /query_key?key=K              one object (JSON; 404 when missing)
//	GET /get_all_keys?prefix=&after=&limit=   a page of keys {keys, next}
//	GET /get_all_segments             all segments (JSON)
//	GET /query_segment?segment=S      one segment (JSON; 404 when missing)
//	GET /api/summary                  the state at a glance (JSON, SummaryJSON)
//	GET /dashboard/                   the live dashboard page (/ redirects to it)
//	POST /api/v1/drain_jobs, GET /api/v1/drain_jobs/query, GET /api/v1/segments/status
//	                                  drain jobs (drain.go)
func AdminHandler(m *master.Master) http.Handler {
	a := admin{m}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "OK")
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		writeMetrics(w, m)
	})
	mux.HandleFunc("GET /query_key", a.queryKey)
	mux.HandleFunc("GET /get_all_keys", a.allKeys)
	mux.HandleFunc("GET /get_all_segments", a.allSegments)
	mux.HandleFunc("GET /query_segment", a.querySegment)
	mux.HandleFunc("GET /api/summary", a.summary)
	mountDrain(mux, m) // drain jobs (drain.go)
	dashboard.Mount(mux, dashboard.Master)
	return mux
}

// RequireSecret guards an admin handler: with a secret set, every request
// other than GET, HEAD and OPTIONS (the calls that change something) needs
// "Authorization: Bearer <secret>" and is answered 401 with an OpenAI-style
// error otherwise. Reads stay open; an empty secret guards nothing.
func RequireSecret(secret string, h http.Handler) http.Handler {
	if secret == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if !BearerOK(r.Header.Get("Authorization"), secret) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="mooncake"`)
				httpjson.Error(w, http.StatusUnauthorized, "authentication_error",
					fmt.Sprintf("%s %s needs the cluster secret: Authorization: Bearer <secret>", r.Method, r.URL.Path))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// admin holds the handlers of the admin API.
type admin struct{ m *master.Master }

func (a admin) queryKey(w http.ResponseWriter, r *http.Request) {
	queryOne(w, r, "key", a.m.Query, objectJSON)
}

// queryOne answers a lookup by the query parameter param: 400 without it,
// get's error mapped by httpCode, or encode of what get found.
func queryOne[T any](w http.ResponseWriter, r *http.Request, param string, get func(string) (T, error), encode func(T) map[string]any) {
	name := r.URL.Query().Get(param)
	if name == "" {
		httpError(w, http.StatusBadRequest, "missing "+param+" parameter")
		return
	}
	v, err := get(name)
	if err != nil {
		httpError(w, httpCode(err), err.Error())
		return
	}
	writeJSON(w, encode(v))
}

func (a admin) allKeys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 1000
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100000 {
			httpError(w, http.StatusBadRequest, "limit must be an integer in [1,100000]")
			return
		}
		limit = n
	}
	keys, next := a.m.List(q.Get("prefix"), q.Get("after"), limit)
	type row struct {
		Key      string `json:"key"`
		Size     uint64 `json:"size"`
		Replicas int    `json:"replicas"`
	}
	rows := make([]row, len(keys))
	for i, k := range keys {
		rows[i] = row{k.Key, k.Size, k.Replicas}
	}
	writeJSON(w, map[string]any{"keys": rows, "next": next})
}

func (a admin) allSegments(w http.ResponseWriter, _ *http.Request) {
	segs := a.m.Segments()
	out := make([]map[string]any, len(segs))
	for i, s := range segs {
		out[i] = segmentJSON(s)
	}
	writeJSON(w, out)
}

func (a admin) querySegment(w http.ResponseWriter, r *http.Request) {
	queryOne(w, r, "segment", a.m.Segment, segmentJSON)
}

func httpCode(err error) int {
	switch {
	case errors.Is(err, master.ErrObjectNotFound), errors.Is(err, master.ErrSegmentNotFound):
		return http.StatusNotFound
	case errors.Is(err, master.ErrInvalidParams):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// httpError writes the admin API's error body, {"error": msg}.
func httpError(w http.ResponseWriter, code int, msg string) {
	httpjson.Write(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, v any) { httpjson.Write(w, http.StatusOK, v) }

func objectJSON(o master.ObjectInfo) map[string]any {
	reps := make([]map[string]any, len(o.Replicas))
	for i, r := range o.Replicas {
		reps[i] = map[string]any{"segment": r.Segment, "endpoint": r.Endpoint, "addr": r.Addr, "size": r.Size}
	}
	return map[string]any{"key": o.Key, "size": o.Size, "crc32c": o.CRC, "complete": o.Complete, "replicas": reps,
		"created_unix_ms": unixMs(o.Created), "last_access_unix_ms": unixMs(o.LastAccess),
		"lease_until_unix_ms": unixMs(o.LeaseUntil), "soft_pin_until_unix_ms": unixMs(o.SoftPinUntil), "hard_pin": o.HardPin}
}

func segmentJSON(s master.SegmentInfo) map[string]any {
	return map[string]any{"name": s.Name, "endpoint": s.Endpoint, "client": s.Client, "base": s.Base, "size": s.Size,
		"capacity": s.Capacity, "used": s.Used, "objects": s.Objects, "draining": s.Draining}
}

// writeMetrics renders the core's state in the Prometheus text format.
func writeMetrics(w http.ResponseWriter, m *master.Master) {
	st := m.Stats()
	var b strings.Builder
	metric := func(name, typ, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", name, help, name, typ, name, v)
	}
	metric("mooncake_master_objects", "gauge", "Complete objects.", float64(st.Objects))
	metric("mooncake_master_pending_puts", "gauge", "Puts started and not finished.", float64(st.IncompleteObjects))
	metric("mooncake_master_put_slots", "gauge", "Space reserved for clients' next small puts.", float64(st.PutSlots))
	metric("mooncake_master_capacity_bytes", "gauge", "Total capacity of mounted segments.", float64(st.Capacity))
	metric("mooncake_master_used_bytes", "gauge", "Allocated bytes in mounted segments (not counting freed bytes being scrubbed).", float64(st.Used))
	metric("mooncake_master_scrubbing_bytes", "gauge", "Freed bytes waiting for their storage node to zero them before reuse (scrubbing, on with data-path grants).", float64(st.Scrubbing))
	metric("mooncake_master_scrub_held_bytes", "gauge", "Of the scrubbing bytes, those a removed or evicted put's write grant may still cover: named for zeroing, and so reused by another tenant, only when it ends.", float64(st.ScrubHeld))
	metric("mooncake_master_segments", "gauge", "Mounted segments.", float64(st.Segments))
	metric("mooncake_master_clients", "gauge", "Live clients.", float64(st.Clients))
	metric("mooncake_master_put_starts_total", "counter", "PutStart calls that allocated space.", float64(st.PutStarts))
	metric("mooncake_master_puts_total", "counter", "Puts completed (PutEnd).", float64(st.Puts))
	metric("mooncake_master_put_revokes_total", "counter", "Puts revoked.", float64(st.PutRevokes))
	metric("mooncake_master_puts_timed_out_total", "counter", "Unfinished puts cleaned up or preempted.", float64(st.PutsTimedOut))
	metric("mooncake_master_gets_total", "counter", "GetReplicaList hits.", float64(st.Gets))
	metric("mooncake_master_get_misses_total", "counter", "GetReplicaList misses.", float64(st.GetMisses))
	metric("mooncake_master_removes_total", "counter", "Objects removed by request.", float64(st.Removes))
	metric("mooncake_master_evictions_total", "counter", "Objects evicted.", float64(st.Evictions))
	metric("mooncake_master_evicted_bytes_total", "counter", "Bytes evicted (all replicas).", float64(st.EvictedBytes))
	metric("mooncake_master_eviction_runs_total", "counter", "Eviction passes.", float64(st.EvictionRuns))
	metric("mooncake_master_lease_rejections_total", "counter", "Removes/upserts refused or skipped for a lease.", float64(st.LeaseRejections))
	metric("mooncake_master_clients_dropped_total", "counter", "Clients dropped after their TTL.", float64(st.ClientsDropped))
	metric("mooncake_master_utilisation_at_first_eviction", "gauge", "used/capacity when the first eviction ran.", st.UtilisationAtFirstEviction)
	metric("mooncake_master_disk_objects", "gauge", "Keys held only on a disk tier.", float64(st.DiskObjects))
	metric("mooncake_master_disk_gets_total", "counter", "Reads answered with a disk copy.", float64(st.DiskGets))
	metric("mooncake_master_cached_gets_total", "counter", "Reads that confirmed a client's hot-cache version (no replicas, no lease).", float64(st.CachedGets))
	metric("mooncake_master_put_slots_reused_total", "counter", "Put slots made of the version an upsert replaced (no tombstone, no allocation).", float64(st.SlotsReused))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	metric("go_memstats_heap_inuse_bytes", "gauge", "Bytes in in-use heap spans.", float64(ms.HeapInuse))
	metric("go_memstats_heap_alloc_bytes", "gauge", "Bytes of allocated heap objects.", float64(ms.HeapAlloc))
	metric("go_memstats_sys_bytes", "gauge", "Bytes obtained from the system.", float64(ms.Sys))
	b.WriteString("# HELP mooncake_master_segment_capacity_bytes Capacity per segment.\n# TYPE mooncake_master_segment_capacity_bytes gauge\n")
	segs := m.Segments()
	for _, s := range segs {
		fmt.Fprintf(&b, "mooncake_master_segment_capacity_bytes{segment=%q} %d\n", s.Name, s.Capacity)
	}
	b.WriteString("# HELP mooncake_master_segment_used_bytes Allocated bytes per segment.\n# TYPE mooncake_master_segment_used_bytes gauge\n")
	for _, s := range segs {
		fmt.Fprintf(&b, "mooncake_master_segment_used_bytes{segment=%q} %d\n", s.Name, s.Used)
	}
	b.WriteString("# HELP mooncake_master_segment_objects Replicas per segment.\n# TYPE mooncake_master_segment_objects gauge\n")
	for _, s := range segs {
		fmt.Fprintf(&b, "mooncake_master_segment_objects{segment=%q} %d\n", s.Name, s.Objects)
	}
	_, _ = w.Write([]byte(b.String()))
}
