package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/proxy"
)

// Default addresses `mooncake status` asks when given neither flag
// (variables for the tests).
var (
	defaultMasterAdmin = "127.0.0.1:9003"
	defaultProxy       = "127.0.0.1:8000"
)

func newStatusCmd() *cobra.Command {
	var (
		masterFlag, proxyFlag string
		asJSON                bool
		timeout               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Summarise a running cluster: the store master's pool and the proxy's instances",
		Long: `Read the store master's and the proxy's GET /api/summary (the data of their
dashboards; /role and /leader too under --ha) and print one summary: the master's role,
memory and disk tiers, objects, leases, pins, evictions and every segment; the proxy's
health, requests, P/D pairs in flight, KV transfer GB/s and hit rate, TTFT, TPOT and
first-byte percentiles, and each instance's health, load and KV cache.

--master is the master's ADMIN address (its --http-port, 9003 by default, not the gRPC port)
as HOST:PORT or a URL; --proxy the proxy's address. Given neither, both defaults are asked
(` + defaultMasterAdmin + `, ` + defaultProxy + `) and what answers is shown. An endpoint that does not answer
within --timeout is reported on stderr and the command exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			explicit := masterFlag != "" || proxyFlag != ""
			if !explicit {
				masterFlag, proxyFlag = defaultMasterAdmin, defaultProxy
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			st := collectStatus(ctx, &http.Client{}, baseURL(masterFlag), baseURL(proxyFlag))
			var failed []string
			if st.Master != nil && st.Master.Error != "" {
				failed = append(failed, "master "+st.Master.URL)
			}
			if st.Proxy != nil && st.Proxy.Error != "" {
				failed = append(failed, "proxy "+st.Proxy.URL)
			}
			if !explicit && len(failed) == 1 { // one default answered: the other role does not run here
				fmt.Fprintf(cmd.ErrOrStderr(), "note: no answer from the %s (not running here? point --master/--proxy at it)\n", failed[0])
				if st.Master.Error != "" {
					st.Master = nil
				} else {
					st.Proxy = nil
				}
				failed = nil
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(st); err != nil {
					return err
				}
			} else {
				printStatus(out, st)
			}
			if len(failed) == 0 {
				return nil
			}
			return &ExitError{Code: 1, Err: fmt.Errorf("no answer from the %s", strings.Join(failed, " and the "))}
		},
	}
	f := cmd.Flags()
	f.StringVar(&masterFlag, "master", "", "master admin HTTP address HOST:PORT or URL (its --http-port; default "+defaultMasterAdmin+" when neither flag is given)")
	f.StringVar(&proxyFlag, "proxy", "", "proxy address HOST:PORT or URL (default "+defaultProxy+" when neither flag is given)")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	f.DurationVar(&timeout, "timeout", 3*time.Second, "deadline for all the requests")
	return cmd
}

// baseURL turns "host:port" or a URL into a URL without a trailing slash
// ("" stays "": that role is not asked).
func baseURL(s string) string {
	if s == "" {
		return ""
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	return strings.TrimRight(s, "/")
}

// clusterStatus is what `mooncake status --json` prints: each role's
// address, error, and its GET /api/summary as served (the data of the
// dashboard pages, so terminal and browser show the same numbers).
type clusterStatus struct {
	Master *masterStatus `json:"master,omitempty"`
	Proxy  *proxyStatus  `json:"proxy,omitempty"`
}

type masterStatus struct {
	URL    string `json:"url"`
	Error  string `json:"error,omitempty"`  // unreachable or not a master
	Role   string `json:"role,omitempty"`   // --ha: leader or follower
	Leader string `json:"leader,omitempty"` // --ha: the leader's gRPC address
	// The master's /api/summary; nil on an HA follower (it serves none).
	Summary *masterserver.SummaryJSON `json:"summary,omitempty"`
}

type proxyStatus struct {
	URL     string             `json:"url"`
	Error   string             `json:"error,omitempty"`
	Summary *proxy.SummaryJSON `json:"summary,omitempty"` // the proxy's /api/summary
}

// collectStatus asks the master and the proxy (either may be ""), in
// parallel, until ctx ends.
func collectStatus(ctx context.Context, hc *http.Client, masterURL, proxyURL string) clusterStatus {
	var st clusterStatus
	var wg sync.WaitGroup
	if masterURL != "" {
		st.Master = &masterStatus{URL: masterURL}
		wg.Go(func() { fillMaster(ctx, hc, st.Master) })
	}
	if proxyURL != "" {
		st.Proxy = &proxyStatus{URL: proxyURL}
		wg.Go(func() { fillProxy(ctx, hc, st.Proxy) })
	}
	wg.Wait()
	return st
}

// errHTTP is a non-2xx answer; errNotJSON a body that is not the JSON
// expected.
var (
	errHTTP    = errors.New("HTTP error")
	errNotJSON = errors.New("not the expected JSON")
)

func get(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("GET %s: no answer in time: %w", url, ctx.Err())
		}
		return nil, fmt.Errorf("GET %s: %w", url, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		return b, fmt.Errorf("GET %s: %w %d: %s", url, errHTTP, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return b, nil
}

func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	b, err := get(ctx, hc, url)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w: %v", url, errNotJSON, err)
	}
	return nil
}

func fillMaster(ctx context.Context, hc *http.Client, ms *masterStatus) {
	var role struct {
		Role string `json:"role"`
		Addr string `json:"addr"`
	}
	err := getJSON(ctx, hc, ms.URL+"/role", &role)
	if err != nil && !errors.Is(err, errHTTP) && !errors.Is(err, errNotJSON) { // no HTTP answer at all
		ms.Error = err.Error()
		if grpcPort(ctx, ms.URL) {
			ms.Error = ms.URL + " speaks gRPC, not HTTP: give the master's admin port (its --http-port, 9003 by default), not its --port"
		}
		return
	}
	if err == nil && role.Role != "" { // only HA candidates have /role
		ms.Role = role.Role
		var ld struct {
			Addr string `json:"addr"`
		}
		if getJSON(ctx, hc, ms.URL+"/leader", &ld) == nil {
			ms.Leader = ld.Addr
		}
		if role.Role != "leader" {
			return
		}
	}
	var sum masterserver.SummaryJSON
	err = getJSON(ctx, hc, ms.URL+"/api/summary", &sum)
	if err == nil && sum.SegmentList == nil { // JSON, but not the master's (the proxy's has no segment_list)
		err = errNotJSON
	}
	switch {
	case errors.Is(err, errHTTP) || errors.Is(err, errNotJSON):
		ms.Error = ms.URL + " is not a mooncake master admin port (no master /api/summary; the admin port is --http-port, 9003)"
	case err != nil:
		ms.Error = err.Error()
	default:
		sort.Slice(sum.SegmentList, func(i, j int) bool { return sum.SegmentList[i].Name < sum.SegmentList[j].Name })
		ms.Summary = &sum
	}
}

// grpcPort reports whether the server at url answers an HTTP/1 request with
// an HTTP/2 SETTINGS frame, as a gRPC server does (the master's port also
// serves fastrpc and hands a connection to gRPC once its first bytes are
// not fastrpc's preface): the master's --port given where its admin port
// belongs.
func grpcPort(ctx context.Context, url string) bool {
	host := strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://")
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host = host[:i]
	}
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(d)
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: mooncake\r\n\r\n"); err != nil {
		return false
	}
	var hdr [9]byte // frame header: length (3), type (1), flags (1), stream (4)
	_, err = io.ReadFull(c, hdr[:])
	return err == nil && hdr[3] == 0x4 // SETTINGS
}

func fillProxy(ctx context.Context, hc *http.Client, ps *proxyStatus) {
	var sum proxy.SummaryJSON
	err := getJSON(ctx, hc, ps.URL+"/api/summary", &sum)
	if err == nil && sum.Health == "" { // JSON, but not the proxy's
		err = errNotJSON
	}
	switch {
	case errors.Is(err, errHTTP) || errors.Is(err, errNotJSON):
		ps.Error = ps.URL + " is not a mooncake proxy (no proxy /api/summary)"
	case err != nil:
		ps.Error = err.Error()
	default:
		ps.Summary = &sum
	}
}

// printStatus renders the summary for a terminal.
func printStatus(w io.Writer, st clusterStatus) {
	if m := st.Master; m != nil {
		printMaster(w, m)
	}
	if p := st.Proxy; p != nil {
		if st.Master != nil {
			fmt.Fprintln(w)
		}
		printProxy(w, p)
	}
}

func pct(used, capacity uint64) string {
	if capacity == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(used)/float64(capacity))
}

func printMaster(w io.Writer, m *masterStatus) {
	head := "master " + m.URL
	if m.Role != "" {
		head += fmt.Sprintf("  (HA %s, leader %s)", m.Role, orDash(m.Leader))
	}
	fmt.Fprintln(w, head)
	if m.Error != "" {
		fmt.Fprintf(w, "  unreachable: %s\n", m.Error)
		return
	}
	s := m.Summary
	if s == nil {
		fmt.Fprintln(w, "  a follower: ask the leader's admin port for the pool")
		return
	}
	c := s.Counters
	fmt.Fprintf(w, "  memory  %s of %s used (%s) on %d segment(s); %d replica(s) of %s; %d client(s)\n",
		formatSize(s.Memory.Used), formatSize(s.Memory.Capacity), pct(s.Memory.Used, s.Memory.Capacity), s.Segments,
		s.Memory.Objects, formatSize(s.Memory.Bytes), s.Clients)
	fmt.Fprintf(w, "  disk    %d object(s), %s on disk tiers; %d read(s) from disk\n", s.Disk.Objects, formatSize(s.Disk.Bytes), c.DiskGets)
	fmt.Fprintf(w, "  objects %d (+%d puts in progress), %d key(s)  leased %d  pinned %d hard, %d soft\n",
		s.Objects, s.PendingPuts, s.Keys, s.Leased, s.HardPinned, s.SoftPinned)
	fmt.Fprintf(w, "  puts %d  gets %d (misses %d)  removes %d\n", c.Puts, c.Gets, c.GetMisses, c.Removes)
	fmt.Fprintf(w, "  evictions %d (%s)  lease rejections %d  clients dropped %d\n",
		c.Evictions, formatSize(c.EvictedBytes), c.LeaseRejections, c.ClientsDropped)
	if len(s.SegmentList) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SEGMENT\tENDPOINT\tCAPACITY\tUSED\t\tREPLICAS\tDISK")
	for _, g := range s.SegmentList {
		disk := "-"
		if g.DiskTier {
			disk = fmt.Sprintf("%d (%s)", g.DiskObjects, formatSize(g.DiskBytes))
		}
		state := ""
		if g.Draining {
			state = "\tdraining"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%s%s\n", displayKey(g.Name), g.Endpoint, formatSize(g.Capacity), formatSize(g.Used),
			pct(g.Used, g.Capacity), g.Objects, disk, state)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatGBps writes a bandwidth as the dashboard does (MB/s under 1 GB/s).
func formatGBps(x float64) string {
	switch {
	case x < 0.01:
		return fmt.Sprintf("%.2f MB/s", x*1000)
	case x < 1:
		return fmt.Sprintf("%.1f MB/s", x*1000)
	case x < 10:
		return fmt.Sprintf("%.2f GB/s", x)
	}
	return fmt.Sprintf("%.1f GB/s", x)
}

func ms3(s float64) string { return fmt.Sprintf("%.1f ms", s*1000) }

func printProxy(w io.Writer, p *proxyStatus) {
	fmt.Fprintf(w, "proxy %s", p.URL)
	if p.Error != "" {
		fmt.Fprintf(w, "\n  unreachable: %s\n", p.Error)
		return
	}
	s := p.Summary
	fmt.Fprintf(w, "  (%s)\n", s.Health)
	codes := make([]string, 0, len(s.Requests.ByCode))
	for c, n := range s.Requests.ByCode {
		codes = append(codes, fmt.Sprintf("%s: %d", c, n))
	}
	slices.Sort(codes)
	fmt.Fprintf(w, "  requests %d answered (%s), %d in flight on %d P/D pair(s) used\n",
		s.Requests.Total, orDash(strings.Join(codes, ", ")), s.InFlight, len(s.Pairs))
	lat := func(name string, h proxy.HistogramJSON) string {
		if h.Count == 0 {
			return name + " -"
		}
		return fmt.Sprintf("%s p50 %s p99 %s (n=%d)", name, ms3(h.Quantile(0.5)), ms3(h.Quantile(0.99)), h.Count)
	}
	fmt.Fprintf(w, "  %s  %s  %s\n", lat("TTFT", s.TTFT), lat("TPOT", s.TPOT), lat("first byte", s.FirstByte))
	t := s.Transfer
	fmt.Fprintf(w, "  KV transfer %s while pulling (%s in %.0f pull(s))  KV hit rate %.1f%%\n",
		formatGBps(t.GBps), formatSize(uint64(t.PullBytes)), t.Pulls, 100*t.KVHitRate)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ROLE\tINSTANCE\tHEALTH\tIN FLIGHT\tRUNNING\tWAITING\tKV BLOCKS USED\tHIT RATE")
	for _, in := range s.Instances {
		health := "ok"
		if !in.Healthy {
			health = "DOWN"
			if in.Error != "" {
				health += ": " + in.Error
			}
		}
		if !in.Scraped {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t-\t-\t-\t-\n", in.Role, in.URL, health, in.InFlight)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%.0f\t%.0f\t%.0f/%.0f\t%.1f%%\n", in.Role, in.URL, health, in.InFlight,
			in.Running, in.Waiting, in.KVBlocksUsed, in.KVBlocksUsed+in.KVBlocksFree, 100*in.PrefixHitRate)
	}
	tw.Flush()
	if len(s.Pairs) == 0 {
		return
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PREFILL\tDECODE\tIN FLIGHT\tTOTAL")
	for _, pr := range s.Pairs {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\n", pr.Prefill, pr.Decode, pr.InFlight, pr.Total)
	}
	tw.Flush()
}
