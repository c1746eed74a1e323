package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/testbed"
)

// Summary is what a run of results says.
type Summary struct {
	Total    int
	Kinds    map[string]int
	Recovery time.Duration // end of the last failure after the fault, minus the fault (0: none failed)
	Longest  time.Duration // the longest operation
	Messages []string      // one example message per failure kind
}

// Failed reports whether the kind is a failure.
func Failed(kind string) bool { return kind != KindOK && kind != KindLease }

// Summarize counts results and measures recovery from fault.
func Summarize(res []Result, fault time.Time) Summary {
	s := Summary{Kinds: map[string]int{}}
	seen := map[string]bool{}
	var lastFail time.Time
	for _, r := range res {
		s.Total++
		s.Kinds[r.Kind]++
		if d := r.End.Sub(r.Start); d > s.Longest {
			s.Longest = d
		}
		if Failed(r.Kind) {
			if !seen[r.Kind] {
				seen[r.Kind] = true
				s.Messages = append(s.Messages, r.Op+" "+r.Kind+": "+trim(r.Msg, 160))
			}
			if r.End.After(lastFail) {
				lastFail = r.End
			}
		}
	}
	if !fault.IsZero() && lastFail.After(fault) {
		s.Recovery = lastFail.Sub(fault)
	}
	return s
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// String is "N ops: ok 120, http_503 3".
func (s Summary) String() string {
	keys := make([]string, 0, len(s.Kinds))
	for k := range s.Kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.Kinds[k]))
	}
	return fmt.Sprintf("%d ops: %s", s.Total, strings.Join(parts, ", "))
}

// Percentile returns the q-quantile (0..1) of ds (0 when empty).
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}

// Metric reads one unlabelled sample from url/metrics (url is http://...).
func Metric(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s/metrics: no %s", url, name)
}

// BlocksMetric is the engines' gauge of KV blocks held by requests.
const BlocksMetric = "mooncake_engine_kv_blocks_used"

// WaitNoLeak waits until every engine reports zero KV blocks used, or ctx
// ends; it returns the engines still holding blocks.
func WaitNoLeak(ctx context.Context, engines []*testbed.Engine) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := map[string]string{}
	for {
		held := 0
		for _, e := range engines {
			v, err := Metric(ctx, e.URL, BlocksMetric)
			switch {
			case err == nil && v == 0:
				delete(last, e.URL)
				continue
			case err == nil:
				last[e.URL] = fmt.Sprintf("%s@%s: %v blocks", e.URL, e.Host.Name, v)
			case last[e.URL] == "":
				last[e.URL] = fmt.Sprintf("%s@%s: %v", e.URL, e.Host.Name, err)
			}
			held++
		}
		if held == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			var s []string
			for _, v := range last {
				s = append(s, v)
			}
			sort.Strings(s)
			return fmt.Errorf("KV blocks still used: %s", strings.Join(s, "; "))
		case <-tick.C:
		}
	}
}
