package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// BPE is a Hugging Face tokenizer.json of the byte-level BPE family (GPT-2,
// Llama 3, Qwen 2/3, DeepSeek, Mistral's Tekken...), the tokenizers of
// most served models: what engines encode prompts with, so that a router
// names the same blocks.
//
// It is a small implementation of what those files use, written here
// because no maintained pure-Go library loads tokenizer.json (the
// maintained one, Hugging Face's, is Rust; its Go bindings need cgo): the
// added (special) tokens split the text first, as written; the NFC
// normalizer where the file has one; the pre-tokenizer split, either the
// GPT-4 family pattern (Llama 3's, Qwen's: contractions, letters with one
// leading non-letter, numbers in runs of 1 or 3, punctuation, newlines,
// whitespace) or GPT-2's, matched by a hand-written scanner because their
// look-ahead (\s+(?!\S)) is beyond Go's regexp; the byte-to-unicode
// mapping; and BPE merges by rank (with ignore_merges: a word in the
// vocabulary is one token). Anything else in a file (another model type,
// normalizer, pre-tokenizer or pattern) is ErrUnsupported, never guessed.
// Added tokens' lstrip/rstrip/single_word flags are not applied. Safe for
// concurrent use.
type BPE struct {
	vocab        map[string]int
	ranks        map[string]int // "left right" -> merge rank
	ignoreMerges bool
	nfc          bool
	digits       int // the pattern's \p{N}{1,digits}; 0: GPT-2's ` ?\p{N}+`
	gpt2         bool
	added        map[byte][]addedToken // by first byte, longest first
	byteChar     [256]string
	prefix       []int // special tokens before a prompt (post processor)

	mu    sync.Mutex
	cache map[string][]int // pre-token -> ids (bounded)
}

type addedToken struct {
	content string
	id      int
}

// The pre-tokenizer patterns the scanner implements.
const (
	patternGPT4Digits3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternGPT4Digits1 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// LoadBPE reads a tokenizer.json.
func LoadBPE(path string) (*BPE, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Normalizer    *struct{ Type string } `json:"normalizer"`
		PreTokenizer  json.RawMessage        `json:"pre_tokenizer"`
		PostProcessor json.RawMessage        `json:"post_processor"`
		Model         struct {
			Type         string          `json:"type"`
			Vocab        json.RawMessage `json:"vocab"`
			Merges       json.RawMessage `json:"merges"`
			IgnoreMerges bool            `json:"ignore_merges"`
			ByteFallback bool            `json:"byte_fallback"`
			Prefix       *string         `json:"continuing_subword_prefix"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnsupported, path, err)
	}
	if f.Model.Type != "BPE" || f.Model.ByteFallback || (f.Model.Prefix != nil && *f.Model.Prefix != "") {
		return nil, fmt.Errorf("%w: %s: model %s (byte_fallback %v): only byte-level BPE is implemented", ErrUnsupported, path, f.Model.Type, f.Model.ByteFallback)
	}
	t := &BPE{ranks: make(map[string]int, len(f.Model.Merges)/12), ignoreMerges: f.Model.IgnoreMerges, added: map[byte][]addedToken{}, cache: map[string][]int{}}
	if n := f.Normalizer; n != nil {
		if n.Type != "NFC" {
			return nil, fmt.Errorf("%w: %s: normalizer %s", ErrUnsupported, path, n.Type)
		}
		t.nfc = true
	}
	if err := t.preTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnsupported, path, err)
	}
	// merges: ["a b", ...] (older files) or [["a", "b"], ...].
	ms, err := scanMerges(f.Model.Merges)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: merges: %v", ErrUnsupported, path, err)
	}
	if t.vocab, err = scanVocab(f.Model.Vocab); err != nil {
		return nil, fmt.Errorf("%w: %s: vocab: %v", ErrUnsupported, path, err)
	}
	for i, m := range ms {
		if _, dup := t.ranks[m]; !dup {
			t.ranks[m] = i
		}
	}
	for _, a := range f.AddedTokens {
		if a.Content == "" {
			continue
		}
		t.added[a.Content[0]] = append(t.added[a.Content[0]], addedToken{content: a.Content, id: a.ID})
	}
	for _, l := range t.added {
		sort.Slice(l, func(i, j int) bool { return len(l[i].content) > len(l[j].content) })
	}
	for b, r := range byteToRune() {
		t.byteChar[b] = string(r)
	}
	t.prefix = templatePrefix(f.PostProcessor)
	return t, nil
}

// templatePrefix reads the special tokens a TemplateProcessing post
// processor (alone or in a Sequence) puts before a single sequence: Llama
// 3's <|begin_of_text|>.
func templatePrefix(raw json.RawMessage) []int {
	var pp struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			SpecialToken *struct{ ID string } `json:"SpecialToken"`
			Sequence     *struct{ ID string } `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int `json:"ids"`
		} `json:"special_tokens"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &pp) != nil {
		return nil
	}
	switch pp.Type {
	case "Sequence":
		for _, p := range pp.Processors {
			if ids := templatePrefix(p); ids != nil {
				return ids
			}
		}
	case "TemplateProcessing":
		var ids []int
		for _, piece := range pp.Single {
			if piece.Sequence != nil {
				break
			}
			if piece.SpecialToken != nil {
				ids = append(ids, pp.SpecialTokens[piece.SpecialToken.ID].IDs...)
			}
		}
		if ids == nil {
			ids = []int{}
		}
		return ids
	}
	return nil
}

// EncodePrompt is Encode with the special tokens the file's post
// processor puts before a prompt (add_special_tokens, as engines encode a
// completion prompt).
func (t *BPE) EncodePrompt(text string) []int {
	return append(append([]int(nil), t.prefix...), t.Encode(text)...)
}

// preTokenizer accepts Sequence[Split(pattern, Isolated), ByteLevel(no
// regex)] and ByteLevel(use_regex) (GPT-2's pattern).
func (t *BPE) preTokenizer(raw json.RawMessage) error {
	type pt struct {
		Type          string            `json:"type"`
		Pretokenizers []json.RawMessage `json:"pretokenizers"`
		Pattern       struct{ Regex string }
		Behavior      string `json:"behavior"`
		Invert        bool   `json:"invert"`
		UseRegex      *bool  `json:"use_regex"`
		AddPrefix     bool   `json:"add_prefix_space"`
	}
	var top pt
	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}
	list := []json.RawMessage{raw}
	if top.Type == "Sequence" {
		list = top.Pretokenizers
	}
	sawSplit, sawByteLevel := false, false
	for _, r := range list {
		var p pt
		if err := json.Unmarshal(r, &p); err != nil {
			return err
		}
		switch p.Type {
		case "Split":
			if sawSplit || p.Behavior != "Isolated" || p.Invert {
				return fmt.Errorf("pre-tokenizer split %s/%v", p.Behavior, p.Invert)
			}
			switch p.Pattern.Regex {
			case patternGPT4Digits3:
				t.digits = 3
			case patternGPT4Digits1:
				t.digits = 1
			default:
				return fmt.Errorf("pre-tokenizer pattern %q", p.Pattern.Regex)
			}
			sawSplit = true
		case "ByteLevel":
			if p.AddPrefix {
				return fmt.Errorf("byte-level add_prefix_space")
			}
			if p.UseRegex == nil || *p.UseRegex {
				if sawSplit {
					return fmt.Errorf("two splits")
				}
				t.gpt2 = true
			}
			sawByteLevel = true
		default:
			return fmt.Errorf("pre-tokenizer %s", p.Type)
		}
	}
	if !sawByteLevel || !(sawSplit || t.gpt2) {
		return fmt.Errorf("not a byte-level pre-tokenizer")
	}
	return nil
}

// Encode returns text's token ids. Added tokens written in the text are
// their ids; no BOS is added (callers add their model's).
func (t *BPE) Encode(text string) []int {
	var out []int
	start := 0
	for i := 0; i < len(text); {
		if l := t.added[text[i]]; l != nil {
			hit := false
			for _, a := range l {
				if strings.HasPrefix(text[i:], a.content) {
					out = t.encodeText(text[start:i], out)
					out = append(out, a.id)
					i += len(a.content)
					start, hit = i, true
					break
				}
			}
			if hit {
				continue
			}
		}
		i++
	}
	return t.encodeText(text[start:], out)
}

// TokenID is the id of a token of the vocabulary or an added token.
func (t *BPE) TokenID(tok string) (int, bool) {
	if tok != "" {
		for _, a := range t.added[tok[0]] {
			if a.content == tok {
				return a.id, true
			}
		}
	}
	id, ok := t.vocab[tok]
	return id, ok
}

func (t *BPE) encodeText(s string, out []int) []int {
	if s == "" {
		return out
	}
	if t.nfc {
		s = norm.NFC.String(s)
	}
	for len(s) > 0 {
		n := t.nextPiece(s)
		out = t.word(s[:n], out)
		s = s[n:]
	}
	return out
}

// word BPE-encodes one pre-token.
func (t *BPE) word(w string, out []int) []int {
	t.mu.Lock()
	ids, ok := t.cache[w]
	t.mu.Unlock()
	if ok {
		return append(out, ids...)
	}
	var sb strings.Builder
	for i := 0; i < len(w); i++ {
		sb.WriteString(t.byteChar[w[i]])
	}
	mapped := sb.String()
	if id, ok := t.vocab[mapped]; ok && (t.ignoreMerges || utf8.RuneCountInString(mapped) == 1) {
		ids = []int{id}
	} else {
		syms := make([]string, 0, len(mapped))
		for _, r := range mapped {
			syms = append(syms, string(r))
		}
		for len(syms) > 1 {
			best, bestRank := -1, 0
			for i := 0; i+1 < len(syms); i++ {
				if r, ok := t.ranks[syms[i]+" "+syms[i+1]]; ok && (best < 0 || r < bestRank) {
					best, bestRank = i, r
				}
			}
			if best < 0 {
				break
			}
			// merge every occurrence of that pair, left to right
			l, r := syms[best], syms[best+1]
			merged := syms[:0]
			for i := 0; i < len(syms); i++ {
				if i+1 < len(syms) && syms[i] == l && syms[i+1] == r {
					merged = append(merged, l+r)
					i++
				} else {
					merged = append(merged, syms[i])
				}
			}
			syms = merged
		}
		for _, s := range syms {
			if id, ok := t.vocab[s]; ok {
				ids = append(ids, id)
			}
			// a symbol outside the vocabulary cannot happen in a
			// byte-level vocabulary (every byte's char is in it); dropped.
		}
	}
	t.mu.Lock()
	if len(t.cache) < 1<<16 {
		t.cache[w] = ids
	}
	t.mu.Unlock()
	return append(out, ids...)
}

// nextPiece is the length of the pre-token at the start of s (never 0
// for non-empty s).
func (t *BPE) nextPiece(s string) int {
	if t.gpt2 {
		return gpt2Piece(s)
	}
	return gpt4Piece(s, t.digits)
}

func isL(r rune) bool  { return unicode.IsLetter(r) }
func isN(r rune) bool  { return unicode.IsNumber(r) }
func isWS(r rune) bool { return unicode.IsSpace(r) }
func isNL(r rune) bool { return r == '\r' || r == '\n' }

// run is the byte length of the longest prefix of s whose runes satisfy f
// (at most max runes; max < 0 no bound).
func run(s string, f func(rune) bool, max int) int {
	n, k := 0, 0
	for n < len(s) && (max < 0 || k < max) {
		r, sz := utf8.DecodeRuneInString(s[n:])
		if !f(r) {
			break
		}
		n += sz
		k++
	}
	return n
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) (case-insensitively
// for GPT-4's pattern).
func contraction(s string, fold bool) int {
	if len(s) < 2 || s[0] != '\'' {
		return 0
	}
	for _, c := range []string{"s", "t", "re", "ve", "m", "ll", "d"} {
		if len(s) >= 1+len(c) && (s[1:1+len(c)] == c || (fold && strings.EqualFold(s[1:1+len(c)], c))) {
			return 1 + len(c)
		}
	}
	return 0
}

// whitespace matches \s*[\r\n]+ | \s+(?!\S) | \s+ at the start of s (a
// whitespace run): the run up to its last newline; else the run less its
// last rune when a non-space follows (all of it at the end of s); else
// one rune.
func whitespace(s string, newlines bool) int {
	ws := run(s, isWS, -1)
	if ws == 0 {
		return 0
	}
	if newlines {
		last := -1
		for i, r := range s[:ws] {
			if isNL(r) {
				last = i + utf8.RuneLen(r)
			}
		}
		if last > 0 {
			return last
		}
	}
	if ws == len(s) {
		return ws
	}
	_, sz := utf8.DecodeLastRuneInString(s[:ws])
	if ws-sz > 0 {
		return ws - sz
	}
	return ws
}

// gpt4Piece scans (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ |
// \p{N}{1,digits} | ` ?[^\s\p{L}\p{N}]+[\r\n]*` | \s*[\r\n]+ | \s+(?!\S) | \s+.
func gpt4Piece(s string, digits int) int {
	if n := contraction(s, true); n > 0 {
		return n
	}
	r, sz := utf8.DecodeRuneInString(s)
	if isL(r) {
		return sz + run(s[sz:], isL, -1)
	}
	if !isNL(r) && !isN(r) {
		if l := run(s[sz:], isL, -1); l > 0 {
			return sz + l
		}
	}
	if isN(r) {
		return run(s, isN, digits)
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	off := 0
	if r == ' ' {
		off = 1
	}
	if p := run(s[off:], func(r rune) bool { return !isWS(r) && !isL(r) && !isN(r) }, -1); p > 0 {
		n := off + p
		return n + run(s[n:], isNL, -1)
	}
	if n := whitespace(s, true); n > 0 {
		return n
	}
	return sz
}

// gpt2Piece scans 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+.
func gpt2Piece(s string) int {
	if n := contraction(s, false); n > 0 {
		return n
	}
	off := 0
	if s[0] == ' ' {
		off = 1
	}
	for _, f := range []func(rune) bool{isL, isN, func(r rune) bool { return !isWS(r) && !isL(r) && !isN(r) }} {
		if p := run(s[off:], f, -1); p > 0 {
			return off + p
		}
	}
	if n := whitespace(s, false); n > 0 {
		return n
	}
	_, sz := utf8.DecodeRuneInString(s)
	return sz
}

// byteToRune is GPT-2's bytes_to_unicode: printable bytes map to
// themselves, the rest to 256+n in order.
func byteToRune() [256]rune {
	var m [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}
