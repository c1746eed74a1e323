// Package dashboard is the live web dashboard of the master and of the
// proxy: static pages (HTML, CSS and plain JavaScript, no build step)
// embedded in the binary with Go embed, which poll the JSON summary of the
// process that serves them and render it.
//
// # Pages
//
// Mount(mux, Master) or Mount(mux, Proxy) serves a page at GET /dashboard/
// (Prefix) and its files under it (dashboard.css, dashboard.js, the page's
// script), and redirects GET / to it; /dashboard without the slash is
// redirected by the mux. The master mounts Master on its admin HTTP API
// (internal/master AdminHandler), the proxy mounts Proxy on its handler
// (internal/proxy Handler). Files are served with Cache-Control: no-cache,
// so a reload after an upgrade never mixes versions; the pages load nothing
// from outside the process that serves them.
//
// Each page fetches ../api/summary every second: the master's
// masterserver.SummaryJSON (keys, objects, replicas, leases, pins, memory and
// disk tier, counters, segments) or the proxy's proxy.SummaryJSON
// (requests, P/D pairs in flight, instances with their health, load and
// engine metrics, KV transfer, TTFT/TPOT histograms). Rates (puts/s,
// requests/s, GB/s now) are computed in the page from successive polls;
// sparklines and histograms are SVG drawn by hand (static/dashboard.js).
//
// # Contract with tests
//
// Every element that shows a number has a stable data-testid and keeps
// the raw number in data-value while its text is formatted (bytes in
// KiB/MiB/GiB, ratios in %, seconds in ms/s, bandwidth in MB/s or GB/s);
// table rows carry data-testid="segment-row" / "instance-row" / "pair-row"
// and a key attribute (data-name, data-url, data-decode), their cells
// data-field. body's data-renders counts renders, the element
// data-testid="status" says "live" or the last fetch error, and
// window.dashboardRefresh() fetches and renders once more, resolving when
// done. The browser test (browser_test.go) starts a master with storage
// nodes and a P/D cluster, loads both pages in headless Chromium
// (github.com/chromedp/chromedp driving Debian's chromium; skipped when it
// is missing unless CI is set), checks each shown number against the JSON
// endpoints read before and after the page's fetch, and saves full-page
// screenshots, master-dashboard.png and proxy-dashboard.png, under
// $MOONCAKE_TEST_ARTIFACTS (default test-artifacts/ at the repository
// root).
package dashboard
