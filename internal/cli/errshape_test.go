package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// errorOf sends one request and returns the status and the decoded body.
func errorOf(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s %s: not JSON: %q", method, url, raw)
	}
	return resp.StatusCode, v
}

// TestErrorShapeProxyAndEngine: the engine and the proxy answer errors with
// the same OpenAI object, {"error": {"message", "type", "param", "code"}},
// and a bad parameter is named in "param" in the client's words (no Go
// struct in the message), whether the engine is asked directly or through
// the proxy.
func TestErrorShapeProxyAndEngine(t *testing.T) {
	engineURL := startServe(t, "--model", "tiny")
	line, _ := startCmd(t, "up", "--port", "0", "--model", "tiny")
	proxyURL := regexp.MustCompile(`proxy on (http://\S+)`).FindStringSubmatch(line)
	if proxyURL == nil {
		t.Fatalf("up printed %q", line)
	}
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	shape := func(who string, code int, v map[string]any, wantCode int) map[string]any {
		t.Helper()
		e, ok := v["error"].(map[string]any)
		if code != wantCode || !ok || len(v) != 1 || len(e) != 4 {
			t.Fatalf("%s: status %d body %v, want %d and {error: {message, type, param, code}}", who, code, v, wantCode)
		}
		for _, k := range []string{"message", "type", "param", "code"} {
			if _, ok := e[k]; !ok {
				t.Fatalf("%s: no %q in %v", who, k, e)
			}
		}
		if e["code"] != float64(wantCode) {
			t.Fatalf("%s: code %v in body, status %d", who, e["code"], wantCode)
		}
		return e
	}
	for _, body := range []string{`{"prompt":"hi","temperature":"NaN"}`, `{"prompt":"hi","temperature":"NaN","stream":true}`} {
		var got []map[string]any
		for who, base := range map[string]string{"engine": engineURL, "proxy": proxyURL[1]} {
			code, v := errorOf(t, "POST", base+"/v1/completions", body)
			e := shape(who, code, v, 400)
			if e["param"] != "temperature" || !strings.Contains(e["message"].(string), "temperature must be a finite number") ||
				strings.Contains(e["message"].(string), "commonParams") {
				t.Fatalf("%s: %v", who, e)
			}
			got = append(got, e)
		}
		if got[0]["message"] != got[1]["message"] || got[0]["type"] != got[1]["type"] {
			t.Fatalf("engine and proxy differ: %v vs %v", got[0], got[1])
		}
	}
	// Errors the proxy makes itself, and unknown routes on both.
	code, v := errorOf(t, "POST", proxyURL[1]+"/v1/completions", `{"prompt":`)
	if e := shape("proxy bad JSON", code, v, 400); e["param"] != nil {
		t.Fatalf("param %v", e["param"])
	}
	code, v = errorOf(t, "GET", proxyURL[1]+"/v1/completions", "")
	shape("proxy GET", code, v, 405)
	for who, base := range map[string]string{"engine": engineURL, "proxy": proxyURL[1]} {
		code, v := errorOf(t, "GET", base+"/no/such/route", "")
		shape(who+" unknown route", code, v, 404)
	}
}
