package tokenizer

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// loadUnigramJSON reads the tokenizer.json Hugging Face converts a
// SentencePiece unigram model to (T5, ALBERT-style and mT5 files): model
// Unigram (vocab [piece, score] in id order, unk_id, byte_fallback), the
// SentencePiece normalizer as a Precompiled charsmap (or none), and the
// Metaspace pre-tokenizer, alone or after WhitespaceSplit. It encodes as
// Hugging Face's tokenizers do: added tokens split out first, then per
// word (the pre-tokenizer splits before every "▁") the Viterbi path of
// highest total score summed in float64, unknown characters scored the
// lowest score less 10, a run of them one unk token (or their bytes, with
// byte fallback). Other normalizers and pre-tokenizers are ErrUnsupported.
func loadUnigramJSON(raw []byte, path string) (*SentencePiece, error) {
	var f struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Model         struct {
			Type         string              `json:"type"`
			UnkID        *int                `json:"unk_id"`
			Vocab        []unigramVocabEntry `json:"vocab"`
			ByteFallback bool                `json:"byte_fallback"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnsupported, path, err)
	}
	if f.Model.Type != "Unigram" {
		return nil, fmt.Errorf("%w: %s: model %s, not Unigram", ErrUnsupported, path, f.Model.Type)
	}
	if len(f.Model.Vocab) == 0 {
		return nil, fmt.Errorf("%w: %s: empty Unigram vocab", ErrUnsupported, path)
	}
	t := &SentencePiece{unigram: true, ids: map[string]int{}, user: map[byte][]addedToken{}, splitAdded: true,
		escapeWS: true, unk: -1, byteFallback: f.Model.ByteFallback}
	if err := t.unigramJSONText(f.Normalizer, f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnsupported, path, err)
	}
	size := len(f.Model.Vocab)
	for _, a := range f.AddedTokens {
		size = max(size, a.ID+1)
	}
	if size > 1<<24 {
		return nil, fmt.Errorf("%w: %s: vocabulary of %d", ErrUnsupported, path, size)
	}
	pieces := make([]string, size)
	t.scores = make([]float32, size)
	t.scores64 = make([]float64, size)
	t.types = make([]int8, size)
	for id, e := range f.Model.Vocab {
		pieces[id], t.scores[id], t.scores64[id], t.types[id] = e.piece, float32(e.score), e.score, spNormal
		if t.byteFallback && len(e.piece) == 6 && strings.HasPrefix(e.piece, "<0x") && e.piece[5] == '>' {
			t.types[id] = spByte
		}
	}
	if u := f.Model.UnkID; u != nil {
		if *u < 0 || *u >= len(f.Model.Vocab) {
			return nil, fmt.Errorf("%w: %s: unk_id %d outside the vocab", ErrUnsupported, path, *u)
		}
		t.types[*u] = spUnknown
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.Content == "" {
			continue
		}
		if a.ID >= len(f.Model.Vocab) {
			pieces[a.ID] = a.Content
		}
		if t.types[a.ID] != spUnknown {
			t.types[a.ID] = spUserDefined
		}
	}
	for id := range pieces {
		if t.types[id] == 0 {
			t.types[id] = spUnused
		}
	}
	if f.Model.UnkID == nil {
		// index wants an unknown piece; without one Hugging Face fails on
		// a character outside the vocab where this emits a placeholder
		// that no text spells
		t.types = append(t.types, spUnknown)
		t.scores = append(t.scores, 0)
		t.scores64 = append(t.scores64, 0)
		pieces = append(pieces, "\x00<unk>")
	}
	if err := t.index(pieces); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Hugging Face's min_score is over the whole vocab.
	t.minScore64 = 0
	for i, s := range t.scores64[:len(f.Model.Vocab)] {
		if i == 0 || s < t.minScore64 {
			t.minScore64 = s
		}
	}
	t.user = map[byte][]addedToken{}
	for _, a := range f.AddedTokens {
		if a.ID >= 0 && a.Content != "" {
			t.user[a.Content[0]] = append(t.user[a.Content[0]], addedToken{content: a.Content, id: a.ID})
		}
	}
	sortAdded(t.user)
	t.prefix = templatePrefix(f.PostProcessor)
	return t, nil
}

// unigramVocabEntry is one [piece, score] of a Unigram vocab.
type unigramVocabEntry struct {
	piece string
	score float64
}

func (e *unigramVocabEntry) UnmarshalJSON(b []byte) error {
	var pair []json.RawMessage
	if err := json.Unmarshal(b, &pair); err != nil {
		return err
	}
	if len(pair) != 2 {
		return fmt.Errorf("vocab entry of %d elements", len(pair))
	}
	if err := json.Unmarshal(pair[0], &e.piece); err != nil {
		return err
	}
	return json.Unmarshal(pair[1], &e.score)
}

// unigramJSONText reads the normalizer and pre-tokenizer of a Unigram
// tokenizer.json into the SentencePiece normalizer's flags.
func (t *SentencePiece) unigramJSONText(normalizer, preTokenizer json.RawMessage) error {
	type step struct {
		Type          string            `json:"type"`
		Charsmap      *string           `json:"precompiled_charsmap"`
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
		Replacement   string            `json:"replacement"`
		AddPrefix     *bool             `json:"add_prefix_space"`
		PrependScheme string            `json:"prepend_scheme"`
		Split         *bool             `json:"split"`
	}
	if len(normalizer) > 0 && string(normalizer) != "null" {
		var n step
		if err := json.Unmarshal(normalizer, &n); err != nil {
			return err
		}
		if n.Type != "Precompiled" {
			return fmt.Errorf("normalizer %s (only Precompiled is implemented for Unigram files)", n.Type)
		}
		if n.Charsmap != nil && *n.Charsmap != "" {
			b, err := base64.StdEncoding.DecodeString(*n.Charsmap)
			if err != nil {
				return fmt.Errorf("precompiled_charsmap: %v", err)
			}
			if t.charsmap, err = parseCharsmap(b); err != nil {
				return fmt.Errorf("precompiled_charsmap: %v", err)
			}
		}
	}
	if len(preTokenizer) == 0 || string(preTokenizer) == "null" {
		return errors.New("no pre_tokenizer (a Metaspace one is expected)")
	}
	var p step
	if err := json.Unmarshal(preTokenizer, &p); err != nil {
		return err
	}
	if p.Type == "Sequence" {
		if len(p.PreTokenizers) != 2 {
			return fmt.Errorf("pre_tokenizer Sequence of %d", len(p.PreTokenizers))
		}
		var ws step
		if err := json.Unmarshal(p.PreTokenizers[0], &ws); err != nil {
			return err
		}
		if ws.Type != "WhitespaceSplit" {
			return fmt.Errorf("pre_tokenizer %s before Metaspace", ws.Type)
		}
		t.removeExtraWS = true // split on whitespace, dropping it
		if err := json.Unmarshal(p.PreTokenizers[1], &p); err != nil {
			return err
		}
	}
	if p.Type != "Metaspace" || p.Replacement != spaceSymbol {
		return fmt.Errorf("pre_tokenizer %s", p.Type)
	}
	t.wordSplit = p.Split == nil || *p.Split
	switch p.PrependScheme {
	case "always":
		t.addDummyPrefix = true
	case "first":
		t.addDummyPrefix, t.prefixFirstOnly = true, true
	case "never":
	case "":
		t.addDummyPrefix = p.AddPrefix == nil || *p.AddPrefix
	default:
		return fmt.Errorf("Metaspace prepend_scheme %q", p.PrependScheme)
	}
	return nil
}

// words calls f for each word of normalized text s: s split before every
// "▁" (Metaspace's split).
func words(s string, f func(string)) {
	for s != "" {
		_, n := utf8.DecodeRuneInString(s)
		end := len(s)
		if i := strings.Index(s[n:], spaceSymbol); i >= 0 {
			end = n + i
		}
		f(s[:end])
		s = s[end:]
	}
}

// sortAdded orders each first byte's added tokens longest first.
func sortAdded(user map[byte][]addedToken) {
	for _, l := range user {
		sort.Slice(l, func(i, j int) bool { return len(l[i].content) > len(l[j].content) })
	}
}
