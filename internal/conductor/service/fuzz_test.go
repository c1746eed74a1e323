package service

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvcache-go/mooncake/internal/conductor"
)

// FuzzRequests: whatever body arrives at an endpoint, the answer is a
// JSON object and never a 5xx (the service is not run: registrations start
// no subscriber).
func FuzzRequests(f *testing.F) {
	for _, seed := range []string{
		`{"endpoint": "tcp://127.0.0.1:1", "type": "vLLM", "modelname": "m", "instance_id": "b", "block_size": 4, "dp_rank": 0}`,
		`{"model": "m", "block_size": 4, "token_ids": [1, 2, 3, 4, 5, 6, 7, 8]}`,
		`{"model": "m", "block_size": 4, "seq_hashes": [18446744073709551615, 0]}`,
		`{"instance_id": "a", "dp_rank": 0}`, `{"model": "m", "block_size": 4, "token_ids": [1], "instance_id": "zz"}`,
		`[]`, `{"block_size": 1e99}`, `{"dp_rank": -0}`, ``,
	} {
		for _, ep := range []byte{0, 1, 2, 3} {
			f.Add(ep, seed)
		}
	}
	s := New(Config{})
	if _, err := s.Register(conductor.Registration{Kind: conductor.KindSGLang, Endpoint: "tcp://127.0.0.1:1", Instance: "a",
		Identity: conductor.Identity{Model: "m", BlockSize: 4}}); err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	paths := []string{"/register", "/unregister", "/query", "/query_by_hash"}
	f.Fuzz(func(t *testing.T, ep byte, body string) {
		path := paths[int(ep)%len(paths)]
		if path == "/unregister" && strings.Contains(body, `"a"`) {
			return // keep the one registration the queries use
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		var v map[string]any
		if w.Code >= 500 || json.Unmarshal(w.Body.Bytes(), &v) != nil {
			t.Fatalf("%s %q: %d %s", path, body, w.Code, w.Body.Bytes())
		}
	})
}
