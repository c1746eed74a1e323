package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Outcome kinds of one request or store operation.
const (
	KindOK       = "ok"
	KindDeadline = "deadline" // did not end within its deadline: a hang
	KindConn     = "conn"     // connection refused/reset/closed: a clear error
	KindHTTP     = "http_"    // prefix: http_503, http_429, ...
	KindWrong    = "wrong"    // answered, but not the reference tokens / bytes
	KindStale    = "stale"    // a store read older than an acknowledged put
	KindNotFound = "not_found"
	KindError    = "error" // any other error, with a message
	KindLease    = "lease" // an upsert refused because a reader holds the object's lease (by design, not a failure)
)

// Result is one finished operation.
type Result struct {
	Op         string // "completion", "put", "get"
	Start, End time.Time
	Kind       string
	Msg        string
	TTFT       time.Duration // completions: to the first token
	TPOT       time.Duration // completions: mean time per output token after the first
}

// Recorder collects results from concurrent workers.
type Recorder struct {
	mu  sync.Mutex
	res []Result
}

// Add records r.
func (r *Recorder) Add(x Result) {
	r.mu.Lock()
	r.res = append(r.res, x)
	r.mu.Unlock()
}

// Results returns a copy of what was recorded, by start time.
func (r *Recorder) Results() []Result {
	r.mu.Lock()
	out := slices.Clone(r.res)
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Result) int { return a.Start.Compare(b.Start) })
	return out
}

// Prompts is the fixed prompt set of the completion load.
var Prompts = []string{
	"The quick brown fox jumps over the lazy dog and keeps on running through the field",
	"Mooncake disaggregates prefill and decode and moves the KV cache between them over the network",
	"In a hole in the ground there lived a hobbit, not a nasty dirty wet hole",
	"Partition tolerance is not optional in a distributed system; what you choose is the rest",
	"A slow link is worse than a dead one because nobody notices it until the deadline",
	"Every acknowledged write must be readable after the failure is over, and never stale",
}

// MaxTokens is the output length of each completion of the load.
const MaxTokens = 16

// completion is one streamed completion's tokens.
type completion struct {
	tokens []int
	ttft   time.Duration
	tpot   time.Duration
}

// Complete streams one completion of prompt from base and returns its
// result; want (if non-nil) are the reference tokens.
func Complete(ctx context.Context, hc *http.Client, base, prompt string, want []int) (Result, []int) {
	r := Result{Op: "completion", Start: time.Now()}
	c, err := stream(ctx, hc, base, prompt)
	r.End = time.Now()
	r.TTFT, r.TPOT = c.ttft, c.tpot
	r.Kind, r.Msg = classify(ctx, err)
	if r.Kind == KindOK && want != nil && !slices.Equal(c.tokens, want) {
		r.Kind, r.Msg = KindWrong, fmt.Sprintf("tokens %v, want %v", c.tokens, want)
	}
	return r, c.tokens
}

type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.body) }

func stream(ctx context.Context, hc *http.Client, base, prompt string) (completion, error) {
	var c completion
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": MaxTokens, "temperature": 0,
		"stream": true, "return_token_ids": true, "ignore_eos": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return c, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return c, &httpError{code: resp.StatusCode, body: strings.TrimSpace(b.String())}
	}
	var first, last time.Time
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			done = true
			break
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var o struct {
			Choices []struct {
				TokenIDs []int `json:"token_ids"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &o); err != nil {
			return c, fmt.Errorf("bad SSE line %q: %w", line, err)
		}
		if o.Error != nil {
			return c, &httpError{code: 500, body: "stream error: " + o.Error.Message}
		}
		for _, ch := range o.Choices {
			if len(ch.TokenIDs) > 0 {
				now := time.Now()
				if first.IsZero() {
					first = now
				}
				last = now
				c.tokens = append(c.tokens, ch.TokenIDs...)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	if !done {
		return c, errors.New("stream ended without [DONE]")
	}
	if !first.IsZero() {
		c.ttft = first.Sub(start)
		if n := len(c.tokens); n > 1 {
			c.tpot = last.Sub(first) / time.Duration(n-1)
		}
	}
	return c, nil
}

// classify turns an error into an outcome kind.
func classify(ctx context.Context, err error) (string, string) {
	if err == nil {
		return KindOK, ""
	}
	var he *httpError
	switch {
	case errors.As(err, &he):
		return fmt.Sprintf("%s%d", KindHTTP, he.code), he.body
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return KindDeadline, err.Error()
	}
	s := err.Error()
	for _, conn := range []string{"connection refused", "connection reset", "EOF", "broken pipe", "no route", "without [DONE]"} {
		if strings.Contains(s, conn) {
			return KindConn, s
		}
	}
	return KindError, s
}

// Load runs workers that each send completions in a loop, each with its
// own deadline, until ctx ends.
type Load struct {
	Workers  int
	Deadline time.Duration        // per request
	URL      func() string        // the target (read before each request: the proxy may move)
	Want     map[string][]int     // reference tokens by prompt (nil: not checked)
	Rec      *Recorder            // where results go
	Pace     time.Duration        // pause between a worker's requests (0: none; 50ms after a failure)
	OnResult func(Result, string) // optional hook (prompt)
}

// Run blocks until ctx ends and every worker's last request ended.
func (l *Load) Run(ctx context.Context) {
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	for w := range l.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ctx.Err() == nil; i += l.Workers {
				p := Prompts[i%len(Prompts)]
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.Deadline)
				r, _ := Complete(rctx, hc, l.URL(), p, l.Want[p])
				cancel()
				l.Rec.Add(r)
				if l.OnResult != nil {
					l.OnResult(r, p)
				}
				if pause := l.Pace; pause > 0 || r.Kind != KindOK {
					select { // a user retries a failure after a pause, not in a tight loop
					case <-ctx.Done():
					case <-time.After(max(pause, 50*time.Millisecond)):
					}
				}
			}
		}()
	}
	wg.Wait()
}

// Reference computes the tokens each prompt must produce, on url (an
// engine with role both, or any healthy path).
func Reference(ctx context.Context, url string) (map[string][]int, error) {
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	out := map[string][]int{}
	for _, p := range Prompts {
		r, toks := Complete(ctx, hc, url, p, nil)
		if r.Kind != KindOK {
			return nil, fmt.Errorf("reference %q: %s %s", p, r.Kind, r.Msg)
		}
		out[p] = toks
	}
	return out, nil
}
