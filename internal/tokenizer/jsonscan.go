package tokenizer

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A tokenizer.json holds hundreds of thousands of vocabulary entries and
// merges; encoding/json decodes them ten times slower than this scanner of
// the two shapes they take (an object of string to integer, an array of
// strings or of string pairs), which matters at every proxy start and in
// the race-enabled tests.

var errJSON = errors.New("tokenizer: malformed JSON")

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\n' || s.b[s.i] == '\r' || s.b[s.i] == '\t') {
		s.i++
	}
}

func (s *scanner) byte(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a JSON string.
func (s *scanner) str() (string, error) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", errJSON
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			v := string(s.b[start:s.i])
			s.i++
			return v, nil
		case c == '\\':
			return s.escaped(start)
		case c < 0x20:
			return "", errJSON
		}
		s.i++
	}
	return "", errJSON
}

// escaped finishes a string that has escapes, from its start.
func (s *scanner) escaped(start int) (string, error) {
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return string(out), nil
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return "", errJSON
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", errJSON
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					s.i += 2
					lo, ok := s.hex4()
					if !ok {
						return "", errJSON
					}
					r2 = utf16.DecodeRune(r, lo)
				}
				r = r2
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", errJSON
		}
	}
	return "", errJSON
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

func (s *scanner) integer() (int, error) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return strconv.Atoi(string(s.b[start:s.i]))
}

// scanVocab reads {"token": id, ...}.
func scanVocab(b []byte) (map[string]int, error) {
	s := &scanner{b: b}
	if !s.byte('{') {
		return nil, errJSON
	}
	m := make(map[string]int, len(b)/16)
	if s.byte('}') {
		return m, nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return nil, err
		}
		if !s.byte(':') {
			return nil, errJSON
		}
		v, err := s.integer()
		if err != nil {
			return nil, errJSON
		}
		m[k] = v
		if s.byte(',') {
			continue
		}
		if s.byte('}') {
			return m, nil
		}
		return nil, errJSON
	}
}

// scanMerges reads ["a b", ...] or [["a", "b"], ...] as "a b" strings.
func scanMerges(b []byte) ([]string, error) {
	s := &scanner{b: b}
	if !s.byte('[') {
		return nil, errJSON
	}
	out := make([]string, 0, len(b)/12)
	if s.byte(']') {
		return out, nil
	}
	for {
		if s.byte('[') {
			a, err := s.str()
			if err != nil || !s.byte(',') {
				return nil, errJSON
			}
			c, err := s.str()
			if err != nil || !s.byte(']') {
				return nil, errJSON
			}
			out = append(out, a+" "+c)
		} else {
			m, err := s.str()
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		if s.byte(',') {
			continue
		}
		if s.byte(']') {
			return out, nil
		}
		return nil, errJSON
	}
}
