package httpjson

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
)

func TestError(t *testing.T) {
	rec := httptest.NewRecorder()
	if got := Error(rec, 429, "rate_limit_error", "queue full"); got != 429 {
		t.Fatalf("Error returned %d", got)
	}
	if rec.Code != 429 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var body map[string]map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	e := body["error"]
	if e["message"] != "queue full" || e["type"] != "rate_limit_error" || e["code"] != float64(429) {
		t.Fatalf("error body %v", e)
	}
	if _, ok := e["param"]; !ok {
		t.Fatalf("error body lacks param: %v", e)
	}
}

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, 201, map[string]int{"n": 3})
	if rec.Code != 201 || rec.Body.String() != "{\"n\":3}\n" {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
}
