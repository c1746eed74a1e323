package server

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/kvcache-go/mooncake/internal/tokenizer"
)

// POST /tokenize answers the ids a request would run with: a prompt
// with its BOS (or without, add_special_tokens false), messages through
// the chat template; usage.prompt_tokens of the same request agrees.
func TestTokenize(t *testing.T) {
	ts := start(t, nil)
	var tk tokenizer.ByteLevel
	ids := func(v map[string]any) string { return fmt.Sprint(v["tokens"]) }
	want := func(x []int) string {
		l := make([]any, len(x))
		for i, v := range x {
			l[i] = float64(v)
		}
		return fmt.Sprint(l)
	}
	code, v := post(t, ts.url+"/tokenize", `{"model":"tiny","prompt":"Hello, world"}`)
	if code != 200 || ids(v) != want(tk.Encode("Hello, world", true)) || v["count"] != 13.0 || v["max_model_len"] == nil {
		t.Fatalf("prompt: %d %v", code, v)
	}
	_, c := post(t, ts.url+"/v1/completions", `{"model":"tiny","prompt":"Hello, world","max_tokens":1}`)
	if c["usage"].(map[string]any)["prompt_tokens"] != v["count"] {
		t.Fatalf("usage %v vs tokenize count %v", c["usage"], v["count"])
	}
	if _, v := post(t, ts.url+"/tokenize", `{"prompt":"ab","add_special_tokens":false,"return_token_strs":true}`); ids(v) != want([]int{'a', 'b'}) || fmt.Sprint(v["token_strs"]) != "[a b]" {
		t.Fatalf("no specials: %v", v)
	}
	msgs := `[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`
	code, v = post(t, ts.url+"/tokenize", `{"messages":`+msgs+`}`)
	wantChat := tk.ApplyChat([]tokenizer.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}})
	if code != 200 || ids(v) != want(wantChat) {
		t.Fatalf("chat: %d %v", code, v)
	}
	_, c = post(t, ts.url+"/v1/chat/completions", `{"messages":`+msgs+`,"max_tokens":1}`)
	if c["usage"].(map[string]any)["prompt_tokens"] != float64(len(wantChat)) {
		t.Fatalf("chat usage %v, tokenize %d", c["usage"], len(wantChat))
	}
	for _, bad := range []struct {
		body string
		code int
	}{{`{}`, 400}, {`{"prompt":"a","messages":[]}`, 400}, {`{"prompt":3}`, 400}, {`{"model":"other","prompt":"a"}`, 404}, {`nope`, 400}} {
		code, v := post(t, ts.url+"/tokenize", bad.body)
		b, _ := json.Marshal(v)
		if code != bad.code || v["error"] == nil {
			t.Errorf("%s: %d %s", bad.body, code, b)
		}
	}
}
