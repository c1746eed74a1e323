package httpjson

import (
	"encoding/json"
	"errors"
	"fmt"
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

func TestErrorOfParam(t *testing.T) {
	base := errors.New("bad request")
	for _, c := range []struct {
		err   error
		param any
	}{
		{fmt.Errorf("%w: temperature must be a finite number", Param("temperature", base)), "temperature"},
		{Param("stop", fmt.Errorf("%w: empty stop sequence", base)), "stop"},
		{fmt.Errorf("%w: no param", base), nil},
	} {
		rec := httptest.NewRecorder()
		if got := ErrorOf(rec, 400, "invalid_request_error", c.err); got != 400 {
			t.Fatalf("ErrorOf returned %d", got)
		}
		var body map[string]map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		e := body["error"]
		if len(body) != 1 || len(e) != 4 || e["param"] != c.param || e["message"] != c.err.Error() || e["code"] != float64(400) {
			t.Fatalf("%v: body %v", c.err, body)
		}
		if !errors.Is(c.err, base) {
			t.Fatal("Param hides the wrapped error")
		}
	}
}
