package dashboard

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Result()
}

// TestMount: / redirects to the page, the page and its files are served,
// the other page and paths outside the directory are not.
func TestMount(t *testing.T) {
	for _, p := range []Page{Master, Proxy, Conductor} {
		mux := http.NewServeMux()
		Mount(mux, p)
		other := map[Page]Page{Master: Proxy, Proxy: Master, Conductor: Master}[p]
		for _, tc := range []struct {
			path     string
			code     int
			location string
			body     string
		}{
			{"/", http.StatusFound, Prefix, ""},
			{"/dashboard", http.StatusTemporaryRedirect, Prefix, ""},
			{"/dashboard/", http.StatusOK, "", "<title>Mooncake " + string(p) + "</title>"},
			{"/dashboard/dashboard.js", http.StatusOK, "", "const Dash"},
			{"/dashboard/" + string(p) + ".js", http.StatusOK, "", "Dash.poll"},
			{"/dashboard/dashboard.css", http.StatusOK, "", ":root"},
			{"/dashboard/" + string(other) + ".html", http.StatusNotFound, "", ""},
			{"/dashboard/nope.js", http.StatusNotFound, "", ""},
			{"/dashboard/static/dashboard.js", http.StatusNotFound, "", ""},
		} {
			resp := get(t, mux, tc.path)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.body) ||
				(tc.location != "" && resp.Header.Get("Location") != tc.location) {
				t.Errorf("%s GET %s: %d %q (Location %q), want %d with %q", p, tc.path, resp.StatusCode, firstLine(body),
					resp.Header.Get("Location"), tc.code, tc.body)
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Handler of an unknown page did not panic")
		}
	}()
	Handler("nope")
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// TestPageIDs: every element a page's script fills by data-testid is in
// the page (a typo would leave a number unshown, silently).
func TestPageIDs(t *testing.T) {
	used := regexp.MustCompile(`\b(?:set|el)\("([a-z0-9-]+)"`)
	for _, p := range []Page{Master, Proxy, Conductor} {
		html, err := fs.ReadFile(static, "static/"+string(p)+".html")
		if err != nil {
			t.Fatal(err)
		}
		js, err := fs.ReadFile(static, "static/"+string(p)+".js")
		if err != nil {
			t.Fatal(err)
		}
		ids := used.FindAllStringSubmatch(string(js), -1)
		if len(ids) < map[Page]int{Master: 20, Proxy: 20, Conductor: 10}[p] {
			t.Fatalf("%s.js fills only %d elements by id", p, len(ids))
		}
		for _, id := range ids {
			if !strings.Contains(string(html), `data-testid="`+id[1]+`"`) {
				t.Errorf("%s.js fills %q, which %s.html lacks", p, id[1], p)
			}
		}
	}
}
