package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unicode/utf8"
)

// Special token ids of the byte-level vocabulary.
const (
	BOS       = 256 // <|bos|>: starts every prompt the server builds from text
	EOS       = 257 // <|eos|>: end of sequence; generation stops on it
	PAD       = 258 // <|pad|>
	SEP       = 259 // <|sep|>: ends a chat message
	VocabSize = 260
)

// Class is the tokenizer_class written to tokenizer_config.json by
// `mooncake model init`.
const Class = "MooncakeByteTokenizer"

// ErrUnsupported reports a tokenizer this engine cannot run.
var ErrUnsupported = errors.New("tokenizer: unsupported")

// ByteLevel maps each byte of UTF-8 text to the token id equal to the byte
// value; ids 256..259 are specials. It needs no files.
type ByteLevel struct{}

// Encode returns the bytes of s as token ids, after BOS if addBOS.
func (ByteLevel) Encode(s string, addBOS bool) []int {
	ids := make([]int, 0, len(s)+1)
	if addBOS {
		ids = append(ids, BOS)
	}
	for i := 0; i < len(s); i++ {
		ids = append(ids, int(s[i]))
	}
	return ids
}

// DecodeBytes returns the bytes of the non-special ids.
func (ByteLevel) DecodeBytes(ids []int) []byte {
	b := make([]byte, 0, len(ids))
	for _, id := range ids {
		if id >= 0 && id < 256 {
			b = append(b, byte(id))
		}
	}
	return b
}

// Decode returns the text of ids; specials are dropped and invalid UTF-8
// becomes U+FFFD.
func (t ByteLevel) Decode(ids []int) string {
	return toValidUTF8(t.DecodeBytes(ids))
}

func toValidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]rune, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		out = append(out, r)
		b = b[n:]
	}
	return string(out)
}

// Message is one chat turn.
type Message struct {
	Role    string
	Content string
}

// ApplyChat renders messages with the built-in chat template and returns
// the token ids, ending with the prompt of an assistant turn:
//
//	<|bos|> role "\n" content <|sep|>  (for every message)  "assistant\n"
func (t ByteLevel) ApplyChat(msgs []Message) []int {
	ids := []int{BOS}
	for _, m := range msgs {
		ids = append(ids, t.Encode(m.Role+"\n"+m.Content, false)...)
		ids = append(ids, SEP)
	}
	return append(ids, t.Encode("assistant\n", false)...)
}

// Stream decodes token ids incrementally, holding back the bytes of an
// incomplete UTF-8 character until it is complete.
type Stream struct {
	pending []byte
}

// Add returns the text that the new ids complete.
func (s *Stream) Add(ids []int) string {
	s.pending = append(s.pending, ByteLevel{}.DecodeBytes(ids)...)
	n := len(s.pending)
	// Hold back at most 3 trailing bytes that start an incomplete rune.
	for back := 1; back <= 3 && back <= n; back++ {
		c := s.pending[n-back]
		if c&0xC0 == 0x80 {
			continue // continuation byte, look further back
		}
		if c >= 0xC0 { // a leading byte: is its rune complete?
			need := 2
			if c >= 0xF0 {
				need = 4
			} else if c >= 0xE0 {
				need = 3
			}
			if back < need {
				out := toValidUTF8(s.pending[:n-back])
				s.pending = append([]byte(nil), s.pending[n-back:]...)
				return out
			}
		}
		break
	}
	out := toValidUTF8(s.pending)
	s.pending = s.pending[:0]
	return out
}

// Flush returns whatever is held back.
func (s *Stream) Flush() string {
	out := toValidUTF8(s.pending)
	s.pending = nil
	return out
}

// Load decides the tokenizer of a model directory. A directory written by
// `mooncake model init` (tokenizer_config.json with tokenizer_class
// MooncakeByteTokenizer), or one with no tokenizer files at all and a
// vocabulary of at least VocabSize, uses ByteLevel. Anything else (a
// tokenizer.json, a SentencePiece model, another class) is ErrUnsupported.
func Load(dir string, vocabSize int) (ByteLevel, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	if b, err := os.ReadFile(cfgPath); err == nil {
		var tc struct {
			TokenizerClass string `json:"tokenizer_class"`
		}
		if err := json.Unmarshal(b, &tc); err != nil {
			return ByteLevel{}, fmt.Errorf("%w: %s: %v", ErrUnsupported, cfgPath, err)
		}
		if tc.TokenizerClass != Class {
			return ByteLevel{}, fmt.Errorf("%w: tokenizer_class %q (only the byte-level %s is implemented)", ErrUnsupported, tc.TokenizerClass, Class)
		}
	} else {
		for _, f := range []string{"tokenizer.json", "tokenizer.model", "vocab.json"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				return ByteLevel{}, fmt.Errorf("%w: %s found; only the byte-level tokenizer (%s) is implemented", ErrUnsupported, f, Class)
			}
		}
	}
	if vocabSize < VocabSize {
		return ByteLevel{}, fmt.Errorf("%w: vocab_size %d is smaller than the byte-level vocabulary (%d)", ErrUnsupported, vocabSize, VocabSize)
	}
	return ByteLevel{}, nil
}

// WriteConfig writes tokenizer_config.json naming the byte-level tokenizer.
func WriteConfig(dir string) error {
	b, _ := json.MarshalIndent(map[string]any{
		"tokenizer_class": Class,
		"bos_token":       "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>",
		"special_tokens": map[string]int{"<|bos|>": BOS, "<|eos|>": EOS, "<|pad|>": PAD, "<|sep|>": SEP},
	}, "", "  ")
	return os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), append(b, '\n'), 0o644)
}
