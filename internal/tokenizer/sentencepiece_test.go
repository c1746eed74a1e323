package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// spFile returns a real SentencePiece model file fetched by
// scripts/fetch-tokenizers.sh.
func spFile(t testing.TB, dir, name string) string {
	p := filepath.Join("testdata", "sp", dir, name)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing: scripts/fetch-tokenizers.sh (run by scripts/deps.sh) fetches it", p)
		}
		t.Skipf("%s missing: run scripts/fetch-tokenizers.sh", p)
	}
	return p
}

type spRefs struct {
	Texts             []string           `json:"texts"`
	Models            map[string][][]int `json:"models"`
	PromptMistralJSON []int              `json:"prompt_mistral_json"`
}

func loadSPRefs(t *testing.T) spRefs {
	raw, err := os.ReadFile("testdata/sp/refs.json")
	if err != nil {
		t.Fatal(err)
	}
	var r spRefs
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Token ids of real SentencePiece models against SentencePiece itself
// (its C++ library as WebAssembly) for three tokenizer.model files (Llama
// 2's BPE with byte fallback, ALBERT's unigram with NFKC rules, a third
// unigram), and against transformers.js for a SentencePiece-style
// tokenizer.json (Mistral 7B's): testdata/sp/gen_refs.mjs.
func TestSentencePieceMatchesReference(t *testing.T) {
	refs := loadSPRefs(t)
	for _, c := range []struct{ dir, file, ref string }{
		{"llama2", "tokenizer.model", "llama2.model"},
		{"albert30k", "tokenizer.model", "albert30k.model"},
		{"smart", "tokenizer.model", "smart.model"},
		{"mistral", "tokenizer.json", "mistral.json"},
	} {
		t.Run(c.ref, func(t *testing.T) {
			tk, err := LoadFile(spFile(t, c.dir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			want := refs.Models[c.ref]
			if len(want) != len(refs.Texts) || len(want) < 12 {
				t.Fatalf("%d references for %d texts", len(want), len(refs.Texts))
			}
			for i, text := range refs.Texts {
				got := tk.Encode(text)
				if len(got) == 0 && len(want[i]) == 0 {
					continue
				}
				if !reflect.DeepEqual(got, want[i]) {
					t.Errorf("%q:\n got %v\nwant %v", text, got, want[i])
				}
			}
		})
	}
	tk, err := LoadFile(spFile(t, "mistral", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.EncodePrompt("Hello"); !reflect.DeepEqual(got, refs.PromptMistralJSON) {
		t.Fatalf("prompt: %v, want %v", got, refs.PromptMistralJSON)
	}
	model, err := LoadSentencePiece(spFile(t, "llama2", "tokenizer.model"))
	if err != nil {
		t.Fatal(err)
	}
	if got := model.EncodePrompt("Hello"); len(got) != 2 || got[0] != 1 {
		t.Fatalf("llama 2 prompt: %v, want the BOS (1) first", got)
	}
}

// Files that are not SentencePiece models, or use what is not
// implemented, are refused with ErrUnsupported, never guessed.
func TestSentencePieceRefuses(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":      {},
		"garbage":    []byte("\xff\xff\xff\xff"),
		"truncated":  {0x0a, 0x10, 0x0a, 0x01},
		"word model": {0x0a, 0x07, 0x0a, 0x03, '<', 'u', '>', 0x18, 0x02, 0x12, 0x02, 0x18, 0x03},
		"no unknown": {0x0a, 0x03, 0x0a, 0x01, 'a', 0x12, 0x02, 0x18, 0x02},
		"bad type":   {0x0a, 0x05, 0x0a, 0x01, 'a', 0x18, 0x09},
	} {
		if _, err := ParseSentencePiece(b); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	os.WriteFile(p, []byte(`{"normalizer": {"type": "NFKC"}, "model": {"type": "BPE", "byte_fallback": true, "vocab": {}, "merges": []}}`), 0o644)
	if _, err := LoadFile(p); !errors.Is(err, ErrUnsupported) {
		t.Errorf("NFKC tokenizer.json: %v, want ErrUnsupported", err)
	}
}

// The model decoder on arbitrary bytes: an error or a tokenizer that
// encodes, never a panic.
func FuzzParseSentencePiece(f *testing.F) {
	for _, dir := range []string{"llama2", "albert30k"} {
		if b, err := os.ReadFile(filepath.Join("testdata", "sp", dir, "tokenizer.model")); err == nil {
			f.Add(b[:min(len(b), 4096)])
		}
	}
	f.Add([]byte{0x0a, 0x07, 0x0a, 0x03, '<', 'u', '>', 0x18, 0x02, 0x0a, 0x03, 0x0a, 0x01, 'a', 0x12, 0x02, 0x18, 0x02})
	f.Add([]byte{0x0a, 0x07, 0x0a, 0x03, '<', 'u', '>', 0x18, 0x02, 0x0a, 0x03, 0x0a, 0x01, 'a', 0x1a, 0x08, 0x12, 0x06, 4, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		tk, err := ParseSentencePiece(b)
		if err != nil {
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v is not ErrUnsupported", err)
			}
			return
		}
		for _, s := range []string{"a b  c", " héllo wörld 🚀 ", "\xff\xfe", ""} {
			for _, id := range tk.EncodePrompt(s) {
				if id < 0 || id >= len(tk.types) {
					t.Fatalf("id %d of %d pieces", id, len(tk.types))
				}
			}
		}
	})
}

func BenchmarkSentencePieceEncode(b *testing.B) {
	tk, err := LoadSentencePiece(spFile(b, "llama2", "tokenizer.model"))
	if err != nil {
		b.Fatal(err)
	}
	text := "The quick brown fox jumps over the lazy dog. 日本語のテキスト 🚀 " +
		"def f(x):\n    return x**2 + 3.14159\n"
	b.SetBytes(int64(len(text)))
	for n := 0; n < b.N; n++ {
		tk.Encode(text)
	}
}

// The Metaspace form of the same whitespace handling: with prepend_scheme
// always it encodes as the Prepend/Replace normalizer does; with first,
// text after an added token gets no "▁" prefix.
func TestSentencePieceJSONMetaspace(t *testing.T) {
	path := spFile(t, "mistral", "tokenizer.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	load := func(scheme string) PromptEncoder {
		f["normalizer"] = json.RawMessage("null")
		f["pre_tokenizer"] = json.RawMessage(`{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "` + scheme + `", "split": false}`)
		b, _ := json.Marshal(f)
		p := filepath.Join(t.TempDir(), "tokenizer.json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tk, err := LoadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	always, first := load("always"), load("first")
	for _, text := range loadSPRefs(t).Texts {
		if got, want := always.Encode(text), ref.Encode(text); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: Metaspace always %v, Prepend/Replace %v", text, got, want)
		}
	}
	hello, _ := ref.(*SentencePiece).TokenID("\u2581Hello")
	plain, _ := ref.(*SentencePiece).TokenID("Hello")
	if got := first.Encode("Hi</s>Hello"); got[len(got)-1] != plain || got[len(got)-2] != 2 {
		t.Fatalf("first: %v, want ... </s> (2), Hello (%d) without the prefix (%d)", got, plain, hello)
	}
	if got := always.Encode("Hi</s>Hello"); got[len(got)-1] != hello {
		t.Fatalf("always: %v, want ▁Hello (%d) last", got, hello)
	}
}
