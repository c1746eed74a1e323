package dashboard

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// static holds the pages, their scripts and the style sheet.
//
//go:embed static
var static embed.FS

// Page is one dashboard page.
type Page string

// The pages: Master is served by the master's admin HTTP API, Proxy by the
// proxy, Conductor by `mooncake conductor`.
const (
	Master    Page = "master"
	Proxy     Page = "proxy"
	Conductor Page = "conductor"
)

// Prefix is where Mount serves a page: GET /dashboard/ is the page, GET
// /dashboard/NAME one of its static files.
const Prefix = "/dashboard/"

// Handler serves page p at Prefix and the static files under it. It
// panics for an unknown page (a programming error).
func Handler(p Page) http.Handler {
	index := "static/" + string(p) + ".html"
	if _, err := fs.Stat(static, index); err != nil {
		panic(fmt.Sprintf("dashboard: no page %q", p))
	}
	sub, _ := fs.Sub(static, "static")
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The files change with the binary, not at run time; a reload after
		// an upgrade must not mix versions.
		w.Header().Set("Cache-Control", "no-cache")
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if name == "" || name == "index.html" {
			http.ServeFileFS(w, r, static, index)
			return
		}
		if strings.HasSuffix(name, ".html") || path.Base(name) != name {
			http.NotFound(w, r) // one page per server; no directory listings
			return
		}
		files.ServeHTTP(w, r)
	})
}

// Mount registers page p on mux: GET /dashboard/ and its files (Handler),
// and GET / redirecting to it. /dashboard without the slash is redirected
// by the mux.
func Mount(mux *http.ServeMux, p Page) {
	mux.Handle("GET "+Prefix, Handler(p))
	mux.Handle("GET /{$}", http.RedirectHandler(Prefix, http.StatusFound))
}
