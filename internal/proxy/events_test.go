package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// startKVPublisher runs testdata/vllm_kv_publisher.py (Debian's
// python3-zmq and python3-msgpack) and returns its PUB and replay
// endpoints.
func startKVPublisher(t *testing.T, encoding string, tokens []int) (pub, replay string) {
	t.Helper()
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import zmq, msgpack").Run(); err != nil {
		t.Skip("needs python3-zmq and python3-msgpack (scripts/deps.sh)")
	}
	tj, _ := json.Marshal(tokens)
	cmd := exec.Command(py, "testdata/vllm_kv_publisher.py", encoding, string(tj))
	out, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	select {
	case l := <-line:
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "ready" {
			t.Fatalf("publisher said %q (%s)", l, stderr.String())
		}
		return "tcp://127.0.0.1:" + f[1], "tcp://127.0.0.1:" + f[2]
	case <-time.After(20 * time.Second):
		t.Fatalf("publisher not ready: %s", stderr.String())
	}
	return "", ""
}

// A Python publisher emitting vLLM-shaped KV events (one batch lost on the
// PUB socket, recovered through replay) steers the proxy's cache-aware
// and conductor policies to the instance that holds the prompt.
func TestKVEventsSteerRouter(t *testing.T) {
	prompt := strings.Repeat("The events say this prefix lives on the second instance. ", 3)
	toks := tokenizer.ByteLevel{}.Encode(prompt, true)
	nblocks := len(toks) / 16
	for _, tc := range []struct{ encoding, policy string }{{"array", PolicyKVAware}, {"map", PolicyConductor}} {
		t.Run(tc.encoding+"/"+tc.policy, func(t *testing.T) {
			a, b, d := newFake(t, true), newFake(t, true), newFake(t, false, "x")
			pub, replay := startKVPublisher(t, tc.encoding, toks)
			p, err := New(Config{Prefill: []string{a.spec(), b.spec() + ",events=" + pub + ",replay=" + replay},
				Decode: []string{d.srv.URL}, PrefillPolicy: tc.policy, HealthInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx, ln) }()
			defer func() { cancel(); <-done }()
			want := kvevents.PromptBlocks("", 16, toks)
			waitfor.Cond(t, 20*time.Second, "index fed by events", func() bool {
				return p.EventIndex().Matched(b.srv.URL, want) == nblocks && p.Ready()
			})
			st := p.EventStats()[b.srv.URL]
			if st.Gaps == 0 || st.Replayed == 0 {
				t.Fatalf("the lost batch was not detected and replayed: %+v", st)
			}
			m := metrics(t, "http://"+ln.Addr().String())
			if !strings.Contains(m, `mooncake_proxy_kv_event_batches_total{instance="`+b.srv.URL+`",result="replayed"} `) ||
				!strings.Contains(m, `mooncake_proxy_kv_event_blocks{instance="`+b.srv.URL+`"} `+strconv.Itoa(nblocks)) {
				t.Fatalf("event metrics missing:\n%s", m)
			}
			if p.EventIndex().Matched(a.srv.URL, want) != 0 {
				t.Fatal("instance a holds blocks nobody announced")
			}
			body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 3})
			for i := 0; i < 3; i++ {
				if code, out, _ := post(t, "http://"+ln.Addr().String()+"/v1/completions", string(body)); code != 200 {
					t.Fatalf("%d %s", code, out)
				}
				// One at a time: an idle instance with no cache would win
				// over a busy one that has it (the queue term).
				waitfor.Cond(t, 5*time.Second, "prefill half done", func() bool {
					return p.prefill[0].inflight.Load() == 0 && p.prefill[1].inflight.Load() == 0
				})
			}
			waitfor.Cond(t, 5*time.Second, "prefill halves", func() bool { return len(b.got())+len(a.got()) == 3 })
			if len(b.got()) != 3 || len(a.got()) != 0 {
				t.Fatalf("prefill halves: a %d, b %d; want all on b (the events' instance)", len(a.got()), len(b.got()))
			}
		})
	}
}
