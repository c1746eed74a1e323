package httpjson

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestPost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
			http.Error(w, "bad request shape", http.StatusBadRequest)
			return
		}
		if string(b) == `{"fail":true}` {
			http.Error(w, "refused here", http.StatusNotFound)
			return
		}
		_, _ = w.Write(append([]byte("echo:"), b...))
	}))
	defer srv.Close()
	got, err := Post(context.Background(), srv.Client(), srv.URL, []byte(`{"a":1}`), 5*time.Second, 1<<10, "svc")
	if err != nil || string(got) != `echo:{"a":1}` {
		t.Fatalf("Post = %q, %v", got, err)
	}
	_, err = Post(context.Background(), srv.Client(), srv.URL, []byte(`{"fail":true}`), 5*time.Second, 1<<10, "svc")
	if err == nil || !strings.Contains(err.Error(), "svc: 404") || !strings.Contains(err.Error(), "refused here") {
		t.Fatalf("non-200 answer: %v", err)
	}
	got, err = Post(context.Background(), srv.Client(), srv.URL, []byte(`{"a":1}`), 5*time.Second, 4, "svc")
	if err != nil || string(got) != "echo" {
		t.Fatalf("limited answer = %q, %v", got, err)
	}
}
