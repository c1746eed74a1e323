package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var tk ByteLevel
	for _, s := range []string{"", "hello", "héllo wörld ✓ 🚀", "\x00\xff"} {
		ids := tk.Encode(s, true)
		if ids[0] != BOS || len(ids) != len(s)+1 {
			t.Fatalf("%q: ids %v", s, ids)
		}
		if got := string(tk.DecodeBytes(ids)); got != s {
			t.Fatalf("round trip %q -> %q", s, got)
		}
	}
}

func TestStreamHoldsPartialRunes(t *testing.T) {
	var tk ByteLevel
	text := "a🚀b é"
	ids := tk.Encode(text, false)
	var s Stream
	got := ""
	for _, id := range ids {
		part := s.Add([]int{id})
		for _, r := range part {
			if r == '\uFFFD' {
				t.Fatalf("replacement char emitted mid-stream")
			}
		}
		got += part
	}
	got += s.Flush()
	if got != text {
		t.Fatalf("got %q want %q", got, text)
	}
}

func TestChatTemplate(t *testing.T) {
	ids := ByteLevel{}.ApplyChat([]Message{{"user", "hi"}})
	want := append(append([]int{BOS}, ByteLevel{}.Encode("user\nhi", false)...), SEP)
	want = append(want, ByteLevel{}.Encode("assistant\n", false)...)
	if len(ids) != len(want) {
		t.Fatalf("got %v want %v", ids, want)
	}
	for i := range ids {
		if ids[i] != want[i] {
			t.Fatalf("got %v want %v", ids, want)
		}
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		vocab int
		ok    bool
	}{
		{"none", nil, 260, true},
		{"ours", map[string]string{"tokenizer_config.json": `{"tokenizer_class":"MooncakeByteTokenizer"}`}, 260, true},
		{"llama", map[string]string{"tokenizer_config.json": `{"tokenizer_class":"LlamaTokenizer"}`}, 32000, false},
		{"hf-json", map[string]string{"tokenizer.json": `{}`}, 32000, false},
		{"small-vocab", nil, 100, false},
		{"bad-json", map[string]string{"tokenizer_config.json": `{`}, 260, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for f, c := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(dir, tc.vocab)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v", err)
			}
			if err != nil && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err %v is not ErrUnsupported", err)
			}
		})
	}
	dir := t.TempDir()
	if err := WriteConfig(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, 260); err != nil {
		t.Fatal(err)
	}
}
