package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// t5JSON writes T5's real tokenizer.json (testdata/unigram, committed
// gzipped) to a temporary file.
func t5JSON(t *testing.T) string {
	t.Helper()
	f, err := os.Open("testdata/unigram/t5.tokenizer.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// T5's tokenizer.json (a Unigram model, its Precompiled charsmap,
// WhitespaceSplit and Metaspace) against transformers.js on the same file
// and SentencePiece on T5's spiece.model (testdata/unigram/gen_refs.mjs).
// SentencePiece differs on two texts, for reasons of its own: it reads
// "</s>" and "<unk>" in the text as text where Hugging Face's tokenizers
// split added tokens out, and on "abab..." two segmentations into the same
// pieces tie and its lattice keeps the other one than Hugging Face's
// Viterbi (and this one: the first path found).
func TestUnigramJSONMatchesReference(t *testing.T) {
	refs := loadSPRefs(t)
	raw, err := os.ReadFile("testdata/unigram/refs.json")
	if err != nil {
		t.Fatal(err)
	}
	var want struct{ JSON, Model [][]int }
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.JSON) != len(refs.Texts) || len(want.Model) != len(refs.Texts) {
		t.Fatalf("%d/%d references for %d texts", len(want.JSON), len(want.Model), len(refs.Texts))
	}
	tk, err := LoadFile(t5JSON(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tk.(*SentencePiece); !ok {
		t.Fatalf("loaded as %T", tk)
	}
	differ := 0
	for i, text := range refs.Texts {
		got := tk.Encode(text)
		if len(got)+len(want.JSON[i]) > 0 && !reflect.DeepEqual(got, want.JSON[i]) {
			t.Errorf("%q:\n got %v\nwant %v (transformers.js)", text, got, want.JSON[i])
		}
		if !reflect.DeepEqual(want.JSON[i], want.Model[i]) {
			differ++
			if !strings.Contains(text, "</s>") && !strings.HasPrefix(text, "aaaa") {
				t.Errorf("%q: transformers.js and SentencePiece differ where they should not:\n %v\n %v", text, want.JSON[i], want.Model[i])
			}
		}
	}
	if differ != 2 {
		t.Errorf("the references differ on %d texts, want the 2 explained", differ)
	}
	// no prefix: T5's post-processor puts </s> after a prompt only
	if got, enc := tk.EncodePrompt("Hello"), tk.Encode("Hello"); !reflect.DeepEqual(got, enc) || len(got) != 1 {
		t.Errorf("EncodePrompt(Hello) = %v, Encode %v", got, enc)
	}
}

// Unigram files this loader does not implement are refused with a reason.
func TestUnigramJSONRefusesWhatItDoesNotImplement(t *testing.T) {
	base := func(norm, pre string) string {
		return `{"normalizer": ` + norm + `, "pre_tokenizer": ` + pre +
			`, "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["\u2581", -1], ["a", -2]]}}`
	}
	meta := `{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"}`
	for name, body := range map[string]string{
		"nfkc":          base(`{"type": "NFKC"}`, meta),
		"no pretok":     base(`null`, `null`),
		"bert pretok":   base(`null`, `{"type": "BertPreTokenizer"}`),
		"bad scheme":    base(`null`, `{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "sometimes"}`),
		"bad charsmap":  base(`{"type": "Precompiled", "precompiled_charsmap": "AAAA"}`, meta),
		"bad vocab":     `{"pre_tokenizer": ` + meta + `, "model": {"type": "Unigram", "unk_id": 0, "vocab": [["a"]]}}`,
		"unk outside":   `{"pre_tokenizer": ` + meta + `, "model": {"type": "Unigram", "unk_id": 5, "vocab": [["a", -1]]}}`,
		"empty vocab":   `{"pre_tokenizer": ` + meta + `, "model": {"type": "Unigram", "vocab": []}}`,
		"missing bytes": `{"pre_tokenizer": ` + meta + `, "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": true, "vocab": [["<unk>", 0], ["a", -1]]}}`,
	} {
		p := filepath.Join(t.TempDir(), "tokenizer.json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadFile(p); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	// and a small one it does: per word, the best path, unknown runs fused
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	body := base(`null`, `{"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, `+meta+`]}`)
	body = strings.Replace(body, `["a", -2]`, `["a", -2], ["\u2581a", -1.5], ["aa", -1]`, 1)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// "  aaa  xy a" -> ▁a aa | ▁ <unk: xy> | ▁a
	if got, want := tk.Encode("  aaa  xy a"), []int{3, 4, 1, 0, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
}
