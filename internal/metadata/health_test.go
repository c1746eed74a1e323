package metadata

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// GET /health answers 200 "OK"; other methods on it are not health checks.
func TestServerHealth(t *testing.T) {
	srv := httptest.NewServer(NewServer(nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "OK" {
		t.Fatalf("GET /health: %d %q", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/health", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatal("PUT /health answered 200")
	}
}
