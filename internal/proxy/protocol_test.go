package proxy

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// The exact bytes each protocol sends (Go marshals map keys sorted).
func TestBuildHalvesExactBytes(t *testing.T) {
	req, err := decodeObject([]byte(`{"model":"m","prompt":"hi","max_tokens":9,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	tg := Target{Bootstrap: "10.0.0.1:8998", EngineID: "eng-1"}
	id := "0b8f6c2e-4f3a-4c1e-9d2b-7a6e5f4d3c2b"
	const pre = `{"kv_transfer_params":%s,"max_tokens":1,"model":"m","prompt":"hi","stream":false}`
	const dec = `{"kv_transfer_params":%s,"max_tokens":9,"model":"m","prompt":"hi","stream":true,"stream_options":{"include_usage":true}}`
	sub := func(f, kv string) string { return strings.Replace(f, "%s", kv, 1) }
	tests := []struct {
		protocol      string
		key, reqID    string
		prefill, dcod string
	}{
		{ProtocolMooncake, "xfer-" + id, "",
			sub(pre, `{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":"xfer-`+id+`"}`),
			sub(dec, `{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":"10.0.0.1:8998","remote_engine_id":"eng-1","transfer_id":"xfer-`+id+`"}`)},
		{ProtocolVLLMTransferID, "xfer-" + id, "",
			sub(pre, `{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":"xfer-`+id+`"}`),
			sub(dec, `{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":"http://10.0.0.1:8998","remote_engine_id":"eng-1","transfer_id":"xfer-`+id+`"}`)},
		{ProtocolVLLM, id, id,
			sub(pre, `{"do_remote_decode":true,"do_remote_prefill":false}`),
			sub(dec, `{"bootstrap_server_host":"10.0.0.1","bootstrap_server_port":8998,"do_remote_decode":false,"do_remote_prefill":true}`)},
		{ProtocolVLLMSeed, id, id, sub(pre, `{"do_remote_decode":true}`), ""},
		{ProtocolSGLang, "sglang-room-42", "",
			`{"bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":42,"max_tokens":9,"model":"m","prompt":"hi","stream":true,"stream_options":{"include_usage":true}}`,
			`{"bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":42,"max_tokens":9,"model":"m","prompt":"hi","stream":true,"stream_options":{"include_usage":true}}`},
	}
	for _, tc := range tests {
		h, err := BuildHalves(tc.protocol, req, tg, id, 42|1<<63)
		if err != nil {
			t.Fatal(err)
		}
		if h.Key != tc.key || h.RequestID != tc.reqID || string(h.Prefill) != tc.prefill || string(h.Decode) != tc.dcod {
			t.Errorf("%s:\n key %q req %q\n prefill %s\n    want %s\n decode %s\n   want %s", tc.protocol, h.Key, h.RequestID, h.Prefill, tc.prefill, h.Decode, tc.dcod)
		}
	}
	if _, err := BuildHalves("nixl", req, tg, id, 1); err == nil {
		t.Fatal("unknown protocol accepted")
	}
	// max_completion_tokens follows max_tokens in a prefill half.
	req["max_completion_tokens"] = json.Number("9")
	h, _ := BuildHalves(ProtocolVLLM, req, tg, id, 0)
	if !strings.Contains(string(h.Prefill), `"max_completion_tokens":1,`) {
		t.Fatalf("prefill %s", h.Prefill)
	}
}

// upstream records what a fake engine got: path, headers, raw body.
type upstream struct {
	mu     sync.Mutex
	hdrs   []http.Header
	bodies []string
	answer string
	boot   *httptest.Server
	srv    *httptest.Server
}

func newUpstream(t *testing.T, answer, query string) *upstream {
	u := &upstream{answer: answer}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.hdrs = append(u.hdrs, r.Header.Clone())
		u.bodies = append(u.bodies, string(b))
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, u.answer)
	}))
	t.Cleanup(u.srv.Close)
	u.boot = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/query":
			io.WriteString(w, query)
		case "/health":
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(u.boot.Close)
	return u
}

func (u *upstream) spec() string {
	return u.srv.URL + ",bootstrap=" + strings.TrimPrefix(u.boot.URL, "http://")
}

func (u *upstream) one(t *testing.T) (http.Header, map[string]any) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.bodies) != 1 {
		t.Fatalf("%d requests, want 1", len(u.bodies))
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(u.bodies[0]), &m); err != nil {
		t.Fatal(err)
	}
	return u.hdrs[0], m
}

// Through the proxy: each protocol's halves, headers and pairing, against
// fake upstreams (the registry shapes of ours and of vLLM's reworked
// connector).
func TestProxyProtocols(t *testing.T) {
	uuidRE := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	ours := `{"engine_id":"eng-p","workers":[{"addr":"x"}]}`
	vllmQuery := `{"0":{"engine_id":"eng-v","worker_addr":{"0":{"0":"tcp://10.0.0.1:5555"}}}}`
	seedAnswer := `{"choices":[{"text":"x"}],"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_host":"10.9.9.9","remote_port":8998,"remote_engine_id":"e9"}}`
	for _, proto := range Protocols {
		t.Run(proto, func(t *testing.T) {
			q := ours
			if proto == ProtocolVLLMTransferID {
				q = vllmQuery
			}
			ans := `{"choices":[{"text":"ok"}]}`
			if proto == ProtocolVLLMSeed {
				ans = seedAnswer
			}
			pre, dec := newUpstream(t, ans, q), newUpstream(t, `{"choices":[{"text":"decoded"}]}`, q)
			_, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.srv.URL}, Protocol: proto})
			code, body, hdr := post(t, srv.URL+"/v1/completions", `{"prompt":"hello","max_tokens":5}`)
			if code != 200 || body != `{"choices":[{"text":"decoded"}]}` {
				t.Fatalf("%d %s", code, body)
			}
			waitfor.Cond(t, 5*time.Second, "prefill half", func() bool { pre.mu.Lock(); defer pre.mu.Unlock(); return len(pre.bodies) > 0 })
			ph, pb := pre.one(t)
			dh, db := dec.one(t)
			pk, _ := pb["kv_transfer_params"].(map[string]any)
			dk, _ := db["kv_transfer_params"].(map[string]any)
			key := hdr.Get("X-Transfer-Id")
			bootHost := "127.0.0.1"
			switch proto {
			case ProtocolMooncake, ProtocolVLLMTransferID:
				eng := map[string]string{ProtocolMooncake: "eng-p", ProtocolVLLMTransferID: "eng-v"}[proto]
				addr := strings.TrimPrefix(pre.boot.URL, "http://")
				if proto == ProtocolVLLMTransferID {
					addr = pre.boot.URL
				}
				if !strings.HasPrefix(key, "xfer-") || pk["transfer_id"] != key || dk["transfer_id"] != key ||
					dk["remote_engine_id"] != eng || dk["remote_bootstrap_addr"] != addr || pb["max_tokens"] != 1.0 {
					t.Fatalf("key %q prefill %v decode %v", key, pb, db)
				}
			case ProtocolVLLM:
				if !uuidRE.MatchString(key) || ph.Get("X-Request-Id") != key || dh.Get("X-Request-Id") != key {
					t.Fatalf("key %q, X-Request-Id %q %q", key, ph.Get("X-Request-Id"), dh.Get("X-Request-Id"))
				}
				if len(pk) != 2 || pk["do_remote_decode"] != true || pk["do_remote_prefill"] != false {
					t.Fatalf("prefill params %v", pk)
				}
				port := float64(pre.boot.Listener.Addr().(*net.TCPAddr).Port)
				if len(dk) != 4 || dk["bootstrap_server_host"] != bootHost || dk["bootstrap_server_port"] != port || dk["do_remote_prefill"] != true {
					t.Fatalf("decode params %v", dk)
				}
			case ProtocolVLLMSeed:
				if !uuidRE.MatchString(key) || ph.Get("X-Request-Id") != key || dh.Get("X-Request-Id") != key {
					t.Fatalf("key %q, X-Request-Id %q %q", key, ph.Get("X-Request-Id"), dh.Get("X-Request-Id"))
				}
				want := `{"do_remote_decode":false,"do_remote_prefill":true,"remote_engine_id":"e9","remote_host":"10.9.9.9","remote_port":8998}`
				if got, _ := json.Marshal(dk); string(got) != want || db["max_tokens"] != 5.0 {
					t.Fatalf("decode params %s, want prefill's %s", got, want)
				}
			case ProtocolSGLang:
				if pre.bodies[0] != dec.bodies[0] || !strings.HasPrefix(key, "sglang-room-") ||
					pb["bootstrap_host"] != bootHost || pb["bootstrap_room"] == nil || pk != nil {
					t.Fatalf("key %q prefill %s decode %s", key, pre.bodies[0], dec.bodies[0])
				}
			}
		})
	}
}

func TestQueryEngineID(t *testing.T) {
	for in, want := range map[string]string{
		`{"engine_id":"a","workers":[{}]}`:                "a",
		`{"engine_id":"a","workers":[]}`:                  "",
		`{"0":{"engine_id":"v","worker_addr":{}},"1":{}}`: "v",
		`{"1":{"engine_id":"v"}}`:                         "",
	} {
		var q map[string]json.RawMessage
		json.Unmarshal([]byte(in), &q)
		got, err := QueryEngineID(q)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%s: %q %v, want %q", in, got, err, want)
		}
	}
}
