package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvcache-go/mooncake/internal/conductor"
	"github.com/kvcache-go/mooncake/internal/dashboard"
)

// apiError is the error body: {"error", "reason", "field"}.
type apiError struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Field  string `json:"field,omitempty"`
}

type reqError struct {
	code   int
	reason string
	field  string
	msg    string
}

func (e *reqError) Error() string { return e.msg }

func bad(reason, field, format string, a ...any) *reqError {
	return &reqError{code: http.StatusBadRequest, reason: reason, field: field, msg: fmt.Sprintf(format, a...)}
}

// Handler is the service's HTTP API.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/register", s.post("register", s.handleRegister))
	mux.HandleFunc("/unregister", s.post("unregister", s.handleUnregister))
	mux.HandleFunc("/query", s.post("query", s.handleQuery))
	mux.HandleFunc("/query_by_hash", s.post("query_by_hash", s.handleQueryByHash))
	mux.HandleFunc("/global_view", s.get("global_view", func(*http.Request) (any, error) { return s.idx.GlobalView(), nil }))
	mux.HandleFunc("/registrations", s.get("registrations", s.handleRegistrations))
	mux.HandleFunc("/health", s.get("health", func(*http.Request) (any, error) { return map[string]string{"status": "ok"}, nil }))
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/api/summary", s.get("summary", s.summary))
	dashboard.Mount(mux, dashboard.Conductor)
	return mux
}

func (s *Service) post(name string, h func(map[string]json.RawMessage) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			s.done(w, name, t0, http.StatusMethodNotAllowed, apiError{Error: "method not allowed: use POST", Reason: "method_not_allowed"})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
		if err != nil {
			s.done(w, name, t0, http.StatusRequestEntityTooLarge, apiError{Error: "request body too large or unreadable: " + err.Error(), Reason: "invalid_body"})
			return
		}
		var fields map[string]json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&fields); err != nil || fields == nil || dec.More() {
			s.done(w, name, t0, http.StatusBadRequest, apiError{Error: "request body must be one JSON object", Reason: "invalid_json"})
			return
		}
		v, err := h(fields)
		s.answer(w, name, t0, v, err)
	}
}

func (s *Service) get(name string, h func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			s.done(w, name, t0, http.StatusMethodNotAllowed, apiError{Error: "method not allowed: use GET", Reason: "method_not_allowed"})
			return
		}
		v, err := h(r)
		s.answer(w, name, t0, v, err)
	}
}

// answer maps errors to status codes: the one table of them.
func (s *Service) answer(w http.ResponseWriter, name string, t0 time.Time, v any, err error) {
	if err == nil {
		s.done(w, name, t0, http.StatusOK, v)
		return
	}
	var re *reqError
	switch {
	case errors.As(err, &re):
		s.done(w, name, t0, re.code, apiError{Error: re.msg, Reason: re.reason, Field: re.field})
	case errors.Is(err, conductor.ErrUnknownInstance):
		s.done(w, name, t0, http.StatusNotFound, apiError{Error: err.Error(), Reason: "unknown_instance", Field: "instance_id"})
	case errors.Is(err, conductor.ErrUnknownStream):
		s.done(w, name, t0, http.StatusNotFound, apiError{Error: err.Error(), Reason: "not_found"})
	case errors.Is(err, conductor.ErrBlockSize):
		s.done(w, name, t0, http.StatusBadRequest, apiError{Error: err.Error(), Reason: "block_size_mismatch", Field: "block_size"})
	case errors.Is(err, conductor.ErrInvalid):
		s.done(w, name, t0, http.StatusBadRequest, apiError{Error: err.Error(), Reason: "invalid_registration"})
	default:
		s.done(w, name, t0, http.StatusInternalServerError, apiError{Error: err.Error(), Reason: "internal"})
	}
}

func (s *Service) done(w http.ResponseWriter, name string, t0 time.Time, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
	s.m.requests.WithLabelValues(name, strconv.Itoa(code)).Inc()
	s.m.latency.WithLabelValues(name).Observe(time.Since(t0).Seconds())
}

// Field readers: each names the field at fault.

func str(f map[string]json.RawMessage, name string, required bool) (string, error) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		if required {
			return "", bad("missing", name, "%s is required", name)
		}
		return "", nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", bad("invalid_type", name, "%s must be a string", name)
	}
	if required && v == "" {
		return "", bad("invalid_value", name, "%s must not be empty", name)
	}
	return v, nil
}

func integer(f map[string]json.RawMessage, name string, required bool, min int64) (int64, bool, error) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		if required {
			return 0, false, bad("missing", name, "%s is required", name)
		}
		return 0, false, nil
	}
	var n json.Number
	if raw[0] == '"' || json.Unmarshal(raw, &n) != nil {
		return 0, false, bad("invalid_type", name, "%s must be an integer", name)
	}
	v, err := n.Int64()
	if err != nil || v > math.MaxInt32 {
		return 0, false, bad("invalid_type", name, "%s must be an integer", name)
	}
	if v < min {
		return 0, false, bad("invalid_value", name, "%s must be at least %d", name, min)
	}
	return v, true, nil
}

// firstOf reads the first present of several names of one field.
func firstOf(f map[string]json.RawMessage, names ...string) (string, json.RawMessage) {
	for _, n := range names {
		if raw, ok := f[n]; ok && string(raw) != "null" {
			return n, raw
		}
	}
	return names[0], nil
}

func (s *Service) handleRegister(f map[string]json.RawMessage) (any, error) {
	var r conductor.Registration
	var err error
	if r.Endpoint, err = str(f, "endpoint", true); err != nil {
		return nil, err
	}
	typ, err := str(f, "type", true)
	if err != nil {
		return nil, err
	}
	kind, ok := conductor.ParseKind(typ)
	if !ok {
		return nil, bad("invalid_value", "type", "type %q: want vLLM, SGLang or Mooncake", typ)
	}
	r.Kind = kind
	model, _ := firstOf(f, "modelname", "model_name", "model")
	if r.Model, err = str(f, model, true); err != nil {
		return nil, err
	}
	if r.Instance, err = str(f, "instance_id", true); err != nil {
		return nil, err
	}
	bs, _, err := integer(f, "block_size", true, 1)
	if err != nil {
		return nil, err
	}
	r.BlockSize = int(bs)
	dp, _, err := integer(f, "dp_rank", true, 0)
	if err != nil {
		return nil, err
	}
	r.DPRank = int(dp)
	if r.ReplayEndpoint, err = str(f, "replay_endpoint", false); err != nil {
		return nil, err
	}
	if r.Lora, err = str(f, "lora_name", false); err != nil {
		return nil, err
	}
	if r.Tenant, err = str(f, "tenant_id", false); err != nil {
		return nil, err
	}
	salt, _ := firstOf(f, "additionalsalt", "additional_salt")
	if r.Salt, err = str(f, salt, false); err != nil {
		return nil, err
	}
	if _, err := s.Register(r); err != nil {
		return nil, err
	}
	return map[string]any{"status": "registered successfully", "instance_id": r.Instance}, nil
}

func (s *Service) handleUnregister(f map[string]json.RawMessage) (any, error) {
	inst, err := str(f, "instance_id", true)
	if err != nil {
		return nil, err
	}
	tenant, err := str(f, "tenant_id", false)
	if err != nil {
		return nil, err
	}
	if tenant == "" {
		tenant = conductor.DefaultTenant
	}
	dp, _, err := integer(f, "dp_rank", true, 0)
	if err != nil {
		return nil, err
	}
	k := conductor.StreamKey{Instance: inst, Tenant: tenant, DPRank: int(dp)}
	if err := s.Unregister(k); err != nil {
		return nil, err
	}
	return map[string]any{"status": "unregistered successfully", "removed_instances": []string{k.String()}}, nil
}

// queryIdentity reads the fields /query and /query_by_hash share.
func queryIdentity(f map[string]json.RawMessage) (conductor.Query, error) {
	var q conductor.Query
	var err error
	model, _ := firstOf(f, "model", "modelname", "model_name")
	if q.Model, err = str(f, model, true); err != nil {
		return q, err
	}
	bs, _, err := integer(f, "block_size", true, 1)
	if err != nil {
		return q, err
	}
	q.BlockSize = int(bs)
	if q.Lora, err = str(f, "lora_name", false); err != nil {
		return q, err
	}
	if raw, ok := f["lora_id"]; ok && string(raw) != "null" && q.Lora != "" {
		return q, bad("invalid_value", "lora_id", "lora_id is deprecated and must not be sent with lora_name")
	}
	if q.Tenant, err = str(f, "tenant_id", false); err != nil {
		return q, err
	}
	if q.Instance, err = str(f, "instance_id", false); err != nil {
		return q, err
	}
	if q.Salt, err = str(f, "cache_salt", false); err != nil {
		return q, err
	}
	return q, nil
}

func (s *Service) handleQuery(f map[string]json.RawMessage) (any, error) {
	q, err := queryIdentity(f)
	if err != nil {
		return nil, err
	}
	raw, ok := f["token_ids"]
	if !ok || string(raw) == "null" {
		return nil, bad("missing", "token_ids", "token_ids is required")
	}
	if err := json.Unmarshal(raw, &q.Tokens); err != nil {
		return nil, bad("invalid_type", "token_ids", "token_ids must be an array of integers in [0, 2^32)")
	}
	if raw, ok := f["mm_features"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &q.MM); err != nil {
			return nil, bad("invalid_type", "mm_features", "mm_features must be an array of {identifier, offset, length}")
		}
		for _, m := range q.MM {
			if m.Identifier == "" || m.Offset < 0 || m.Length < 1 {
				return nil, bad("invalid_value", "mm_features", "each mm_features entry needs an identifier, offset >= 0 and length >= 1")
			}
		}
		sort.SliceStable(q.MM, func(i, j int) bool { return q.MM[i].Offset < q.MM[j].Offset })
	}
	return s.idx.Query(q)
}

func (s *Service) handleQueryByHash(f map[string]json.RawMessage) (any, error) {
	q, err := queryIdentity(f)
	if err != nil {
		return nil, err
	}
	name, raw := firstOf(f, "seq_hashes", "block_hash", "block_hashes")
	if raw == nil {
		return nil, bad("missing", "seq_hashes", "seq_hashes is required")
	}
	if err := json.Unmarshal(raw, &q.SeqHashes); err != nil {
		return nil, bad("invalid_type", name, "%s must be an array of integers in [0, 2^64)", name)
	}
	return s.idx.QueryHashes(q)
}

// registration is one entry of GET /registrations.
type registration struct {
	Key            string `json:"key"`
	Type           string `json:"type"`
	Endpoint       string `json:"endpoint"`
	ReplayEndpoint string `json:"replay_endpoint"`
	Model          string `json:"modelname"`
	Lora           string `json:"lora_name"`
	Tenant         string `json:"tenant_id"`
	Instance       string `json:"instance_id"`
	BlockSize      int    `json:"block_size"`
	DPRank         int    `json:"dp_rank"`
	Salt           string `json:"additionalsalt"`

	Events conductor.StreamStats `json:"events"`
}

func (s *Service) handleRegistrations(*http.Request) (any, error) {
	st := s.idx.Stats()
	out := []registration{}
	for _, r := range s.idx.Registrations() {
		out = append(out, registration{Key: r.Key().String(), Type: string(r.Kind), Endpoint: r.Endpoint, ReplayEndpoint: r.ReplayEndpoint,
			Model: r.Model, Lora: r.Lora, Tenant: r.Tenant, Instance: r.Instance, BlockSize: r.BlockSize, DPRank: r.DPRank, Salt: r.Salt,
			Events: st[r.Key()]})
	}
	return map[string]any{"count": len(out), "registrations": out}, nil
}
