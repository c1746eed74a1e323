package tokenizer

import (
	"container/heap"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// SentencePiece encodes text as engines serving SentencePiece models do
// (Llama 2, Mistral, Gemma, T5, ALBERT...): from the model's
// tokenizer.model (SentencePiece's ModelProto, LoadSentencePiece), or from
// the tokenizer.json Hugging Face converts it to (a BPE with byte fallback
// and the Prepend/Replace or Metaspace whitespace handling, LoadFile).
//
// It implements what SentencePiece's encoder does, written here because
// the maintained implementation is C++ (its Go ports are unmaintained or
// cgo): the normalizer (a precompiled character map, a Darts double-array
// trie of NFKC-style rules, or identity; leading, trailing and repeated
// whitespace removed where the model says; the dummy "▁" prefix; spaces
// escaped as "▁"), user-defined pieces kept whole, then BPE (the pair
// whose merged piece scores best merged first, leftmost on ties; or, from
// tokenizer.json, the merge of lowest rank) or Unigram (the Viterbi path
// of highest total score, float32 as SentencePiece sums it), and pieces
// outside the vocabulary as their UTF-8 bytes' <0xXX> pieces (byte
// fallback) or one <unk> per run. Safe for concurrent use.
type SentencePiece struct {
	unigram      bool
	ids          map[string]int // every piece
	scores       []float32
	types        []int8
	ranks        map[string]int // tokenizer.json merges "a b" -> rank (nil: scores)
	unk          int
	byteID       [256]int
	byteFallback bool
	user         map[byte][]addedToken // kept whole (user-defined pieces; a tokenizer.json's added tokens)
	splitAdded   bool                  // added tokens split the text before normalization (tokenizer.json)
	// prefixFirstOnly: the dummy prefix goes before the text's start
	// only, not after an added token (Metaspace's prepend_scheme first)
	prefixFirstOnly bool

	addDummyPrefix, removeExtraWS, escapeWS bool
	charsmap                                *charsmap

	maxPieceLen int
	minScore    float32
	prefix      []int

	// A Unigram tokenizer.json (loadUnigramJSON): scores summed in
	// float64 as Hugging Face does, the lowest over the whole vocab, and
	// the Viterbi run per word (Metaspace's split).
	scores64   []float64
	minScore64 float64
	wordSplit  bool
}

// SentencePiece piece types (ModelProto.SentencePiece.Type).
const (
	spNormal      = 1
	spUnknown     = 2
	spControl     = 3
	spUserDefined = 4
	spUnused      = 5
	spByte        = 6
)

// LoadSentencePiece reads a SentencePiece tokenizer.model.
func LoadSentencePiece(path string) (*SentencePiece, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := ParseSentencePiece(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ParseSentencePiece decodes a tokenizer.model: SentencePiece's ModelProto
// (pieces with score and type, the trainer spec's model type, byte
// fallback and special ids, the normalizer spec). Models of other types
// (word, char) and normalization rules given as TSV only are
// ErrUnsupported; a malformed file is an error, never a panic.
func ParseSentencePiece(b []byte) (*SentencePiece, error) {
	t := &SentencePiece{ids: map[string]int{}, user: map[byte][]addedToken{}, unk: -1,
		addDummyPrefix: true, removeExtraWS: true, escapeWS: true}
	modelType, bosID := int64(1), int64(1)
	var pieces []string
	var charsmap []byte
	var haveRules bool
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1: // pieces
			if typ != protowire.BytesType {
				return errors.New("pieces: wrong wire type")
			}
			piece, score, ptype := "", float32(0), int64(spNormal)
			err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					piece = string(v)
				case num == 2 && typ == protowire.Fixed32Type:
					score = math.Float32frombits(uint32(x))
				case num == 3 && typ == protowire.VarintType:
					ptype = int64(x)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("piece %d: %w", len(pieces), err)
			}
			if ptype < spNormal || ptype > spByte {
				return fmt.Errorf("piece %d: type %d", len(pieces), ptype)
			}
			pieces = append(pieces, piece)
			t.scores = append(t.scores, score)
			t.types = append(t.types, int8(ptype))
		case 2: // trainer_spec
			if typ != protowire.BytesType {
				return errors.New("trainer_spec: wrong wire type")
			}
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				if typ != protowire.VarintType {
					return nil
				}
				switch num {
				case 3:
					modelType = int64(x)
				case 35:
					t.byteFallback = x != 0
				case 41:
					bosID = int64(int32(x))
				}
				return nil
			})
		case 3: // normalizer_spec
			if typ != protowire.BytesType {
				return errors.New("normalizer_spec: wrong wire type")
			}
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				switch {
				case num == 2 && typ == protowire.BytesType:
					charsmap = v
				case num == 3 && typ == protowire.VarintType:
					t.addDummyPrefix = x != 0
				case num == 4 && typ == protowire.VarintType:
					t.removeExtraWS = x != 0
				case num == 5 && typ == protowire.VarintType:
					t.escapeWS = x != 0
				case num == 6 && typ == protowire.BytesType:
					haveRules = len(v) > 0
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: tokenizer.model: %v", ErrUnsupported, err)
	}
	switch modelType {
	case 1:
		t.unigram = true
	case 2:
	default:
		return nil, fmt.Errorf("%w: tokenizer.model: model type %d (only unigram and BPE are implemented)", ErrUnsupported, modelType)
	}
	if len(pieces) == 0 {
		return nil, fmt.Errorf("%w: tokenizer.model: no pieces", ErrUnsupported)
	}
	if len(charsmap) > 0 {
		if t.charsmap, err = parseCharsmap(charsmap); err != nil {
			return nil, fmt.Errorf("%w: tokenizer.model: precompiled_charsmap: %v", ErrUnsupported, err)
		}
	} else if haveRules {
		return nil, fmt.Errorf("%w: tokenizer.model: normalization rules without a precompiled map", ErrUnsupported)
	}
	if err := t.index(pieces); err != nil {
		return nil, err
	}
	if bosID >= 0 && int(bosID) < len(pieces) {
		t.prefix = []int{int(bosID)}
	}
	return t, nil
}

// fields walks a protobuf message's fields.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// index builds the lookups from the pieces (scores and types set).
func (t *SentencePiece) index(pieces []string) error {
	for i := range t.byteID {
		t.byteID[i] = -1
	}
	t.minScore = float32(math.MaxFloat32)
	for id, p := range pieces {
		typ := t.types[id]
		if _, dup := t.ids[p]; !dup || typ == spControl || typ == spUnknown || typ == spByte {
			// reserved pieces (control, unknown, byte) win, as in SentencePiece's PieceToId
			t.ids[p] = id
		}
		switch typ {
		case spUnknown:
			t.unk = id
		case spByte:
			if len(p) == 6 && strings.HasPrefix(p, "<0x") && p[5] == '>' {
				if v, err := strconv.ParseUint(p[3:5], 16, 8); err == nil {
					t.byteID[v] = id
				}
			}
		case spUserDefined:
			if p != "" {
				t.user[p[0]] = append(t.user[p[0]], addedToken{content: p, id: id})
			}
		case spNormal:
			t.minScore = min(t.minScore, t.scores[id])
		}
		t.maxPieceLen = max(t.maxPieceLen, len(p))
	}
	if t.unk < 0 {
		return fmt.Errorf("%w: tokenizer.model: no unknown piece", ErrUnsupported)
	}
	if t.byteFallback {
		for b, id := range t.byteID {
			if id < 0 {
				return fmt.Errorf("%w: byte fallback without the piece <0x%02X>", ErrUnsupported, b)
			}
		}
	}
	for _, l := range t.user {
		sort.Slice(l, func(i, j int) bool { return len(l[i].content) > len(l[j].content) })
	}
	return nil
}

// userAt is the id and length of the kept-whole piece at the start of s.
func (t *SentencePiece) userAt(s string) (int, int) {
	if len(s) == 0 {
		return -1, 0
	}
	for _, a := range t.user[s[0]] {
		if strings.HasPrefix(s, a.content) {
			return a.id, len(a.content)
		}
	}
	return -1, 0
}

// TokenID is the id of a piece.
func (t *SentencePiece) TokenID(piece string) (int, bool) {
	id, ok := t.ids[piece]
	return id, ok
}

// EncodePrompt is Encode after the beginning-of-sentence token (the
// model's bos_id, or what a tokenizer.json's post processor puts first):
// engines encode a completion prompt so.
func (t *SentencePiece) EncodePrompt(text string) []int {
	return append(append([]int(nil), t.prefix...), t.Encode(text)...)
}

// Encode returns the ids of text, without special tokens around it.
func (t *SentencePiece) Encode(text string) []int {
	if !t.splitAdded {
		return t.encodeNormalized(t.normalize(text), nil)
	}
	var out []int
	start := 0
	segment := func(end int) {
		s := text[start:end]
		if t.prefixFirstOnly && start > 0 {
			out = t.encodeNormalized(t.normalizeNoPrefix(s), out)
			return
		}
		out = t.encodeNormalized(t.normalize(s), out)
	}
	for i := 0; i < len(text); {
		id, n := t.userAt(text[i:])
		if n == 0 {
			i++
			continue
		}
		segment(i)
		out = append(out, id)
		i += n
		start = i
	}
	segment(len(text))
	return out
}

const spaceSymbol = "\u2581"

// normalizeNoPrefix is normalize without the dummy prefix.
func (t *SentencePiece) normalizeNoPrefix(s string) string {
	c := *t
	c.addDummyPrefix = false
	return c.normalize(s)
}

// normalize is SentencePiece's Normalizer::Normalize.
func (t *SentencePiece) normalize(s string) string {
	if s == "" {
		return ""
	}
	var b strings.Builder
	b.Grow(len(s) + len(s)/2 + 3)
	// prefix gives the normalized form of s's first unit and its length.
	prefix := func(s string) (string, int) {
		if !t.splitAdded {
			if _, n := t.userAt(s); n > 0 {
				return s[:n], n
			}
		}
		if t.charsmap != nil {
			if out, n := t.charsmap.longest(s); n > 0 {
				return out, n
			}
		}
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n <= 1 {
			return "\uFFFD", 1
		}
		return s[:n], n
	}
	if t.removeExtraWS {
		for s != "" {
			p, n := prefix(s)
			if p != " " {
				break
			}
			s = s[n:]
		}
	}
	if s == "" {
		return ""
	}
	space := " "
	if t.escapeWS {
		space = spaceSymbol
	}
	if t.addDummyPrefix {
		b.WriteString(space)
	}
	prevSpace := t.removeExtraWS
	for s != "" {
		p, n := prefix(s)
		for prevSpace && strings.HasPrefix(p, " ") {
			p = p[1:]
		}
		if p != "" {
			if t.escapeWS {
				b.WriteString(strings.ReplaceAll(p, " ", spaceSymbol))
			} else {
				b.WriteString(p)
			}
			prevSpace = t.removeExtraWS && strings.HasSuffix(p, " ")
		}
		s = s[n:]
	}
	out := b.String()
	if t.removeExtraWS {
		for strings.HasSuffix(out, space) {
			out = out[:len(out)-len(space)]
		}
	}
	return out
}

// encodeNormalized appends the ids of normalized text to out.
func (t *SentencePiece) encodeNormalized(s string, out []int) []int {
	if s == "" {
		return out
	}
	if t.wordSplit {
		words(s, func(w string) { out = t.encodePieces(w, out) })
		return out
	}
	return t.encodePieces(s, out)
}

// encodePieces appends the ids of the pieces of normalized text (a word,
// where the pre-tokenizer splits) to out.
func (t *SentencePiece) encodePieces(s string, out []int) []int {
	var pieces []string
	switch {
	case t.unigram && t.scores64 != nil:
		pieces = viterbi(t, s, t.scores64, t.minScore64)
	case t.unigram:
		pieces = viterbi(t, s, t.scores, t.minScore)
	default:
		pieces = t.bpe(s)
	}
	prevUnk := false
	for _, p := range pieces {
		id, ok := t.ids[p]
		if ok && t.types[id] != spUnknown {
			out = append(out, id)
			prevUnk = false
			continue
		}
		if t.byteFallback {
			for i := 0; i < len(p); i++ {
				out = append(out, t.byteID[p[i]])
			}
			prevUnk = false
			continue
		}
		if !prevUnk { // a run of unknown pieces is one <unk>
			out = append(out, t.unk)
		}
		prevUnk = true
	}
	return out
}

// bpe splits s into characters (kept-whole pieces as one) and merges the
// best-scoring adjacent pair (lowest merge rank, from tokenizer.json)
// until none is in the vocabulary. A merged piece of type unused is split
// back into the pieces it was merged from.
func (t *SentencePiece) bpe(s string) []string {
	type sym struct {
		piece      string
		prev, next int
		frozen     bool
	}
	syms := make([]sym, 0, len(s))
	for i := 0; i < len(s); {
		n := 0
		frozen := false
		if !t.splitAdded {
			_, n = t.userAt(s[i:])
			frozen = n > 0
		}
		if n == 0 {
			_, n = utf8.DecodeRuneInString(s[i:])
		}
		syms = append(syms, sym{piece: s[i : i+n], prev: len(syms) - 1, next: len(syms) + 1, frozen: frozen})
		i += n
	}
	syms[len(syms)-1].next = -1
	h := &pairHeap{}
	revMerge := map[string][2]string{}
	add := func(l, r int) {
		if l < 0 || r < 0 || syms[l].frozen || syms[r].frozen {
			return
		}
		merged := syms[l].piece + syms[r].piece
		var score float32
		if t.ranks != nil {
			rank, ok := t.ranks[syms[l].piece+" "+syms[r].piece]
			if !ok {
				return
			}
			score = -float32(rank)
		} else {
			id, ok := t.ids[merged]
			if !ok || t.types[id] == spUnknown {
				return
			}
			score = t.scores[id]
		}
		heap.Push(h, pair{left: l, right: r, score: score, size: len(merged)})
		if t.types != nil {
			if _, seen := revMerge[merged]; !seen {
				revMerge[merged] = [2]string{syms[l].piece, syms[r].piece}
			}
		}
	}
	for i := 1; i < len(syms); i++ {
		add(i-1, i)
	}
	for h.Len() > 0 {
		top := heap.Pop(h).(pair)
		l, r := &syms[top.left], &syms[top.right]
		if l.piece == "" || r.piece == "" || len(l.piece)+len(r.piece) != top.size {
			continue // stale
		}
		l.piece += r.piece
		r.piece = ""
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = top.left
		}
		add(l.prev, top.left)
		add(top.left, l.next)
	}
	var out []string
	var resegment func(p string)
	resegment = func(p string) {
		if id, ok := t.ids[p]; ok && t.types[id] == spUnused {
			if m, ok := revMerge[p]; ok {
				resegment(m[0])
				resegment(m[1])
				return
			}
		}
		out = append(out, p)
	}
	for i := 0; i >= 0 && i < len(syms); i = syms[i].next {
		resegment(syms[i].piece)
	}
	return out
}

type pair struct {
	left, right int
	score       float32
	size        int
}

// pairHeap pops the highest score first, the leftmost among equals.
type pairHeap []pair

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].score != h[j].score {
		return h[i].score > h[j].score
	}
	return h[i].left < h[j].left
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pair)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// viterbi is SentencePiece's unigram encoding: the segmentation of s into
// pieces of highest total score, a character no piece starts with taken
// as unknown (the lowest score less 10); user-defined pieces score above
// any other segmentation of their text; among equal scores the first
// found is kept.
func viterbi[F float32 | float64](t *SentencePiece, s string, scores []F, minScore F) []string {
	type node struct {
		score F
		from  int // start of the last piece (-1: unreached)
		unk   bool
	}
	best := make([]node, len(s)+1)
	for i := range best {
		best[i].from = -1
	}
	best[0].from = 0
	maxScore := F(0)
	for _, sc := range scores {
		maxScore = max(maxScore, sc)
	}
	unkScore := minScore - 10
	for i := 0; i < len(s); {
		_, clen := utf8.DecodeRuneInString(s[i:])
		if best[i].from < 0 {
			i += clen
			continue
		}
		single := false
		for n := 1; n <= t.maxPieceLen && i+n <= len(s); n++ {
			id, ok := t.ids[s[i:i+n]]
			if !ok {
				continue
			}
			typ := t.types[id]
			if typ != spNormal && typ != spUserDefined {
				continue
			}
			score := scores[id]
			if typ == spUserDefined {
				score = F(n)*maxScore - 0.1
			}
			c := best[i].score + score
			if e := &best[i+n]; e.from < 0 || c > e.score {
				*e = node{score: c, from: i}
			}
			if n == clen {
				single = true
			}
		}
		if !single {
			c := best[i].score + unkScore
			if e := &best[i+clen]; e.from < 0 || c > e.score {
				*e = node{score: c, from: i, unk: true}
			}
		}
		i += clen
	}
	var rev []string
	for end := len(s); end > 0; {
		from := best[end].from
		if from < 0 || from >= end {
			return []string{s} // unreachable: every character has a node
		}
		rev = append(rev, s[from:end])
		end = from
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// charsmap is a precompiled normalization map: a Darts-clone double-array
// trie over UTF-8 sequences whose values index NUL-terminated
// replacements.
type charsmap struct {
	units      []uint32
	normalized []byte
}

func parseCharsmap(b []byte) (*charsmap, error) {
	if len(b) < 4 {
		return nil, errors.New("too short")
	}
	n := binary.LittleEndian.Uint32(b)
	if n%4 != 0 || uint64(n) > uint64(len(b)-4) || n == 0 {
		return nil, fmt.Errorf("trie size %d of %d bytes", n, len(b)-4)
	}
	m := &charsmap{units: make([]uint32, n/4), normalized: b[4+n:]}
	for i := range m.units {
		m.units[i] = binary.LittleEndian.Uint32(b[4+4*i:])
	}
	return m, nil
}

// longest is the replacement of the longest rule matching s's start and
// the bytes it replaces (0: none).
func (m *charsmap) longest(s string) (string, int) {
	u := m.units
	offset := func(x uint32) uint32 { return (x >> 10) << ((x & (1 << 9)) >> 6) }
	pos := offset(u[0])
	bestLen, bestVal := 0, uint32(0)
	for i := 0; i < len(s); i++ {
		c := uint32(s[i])
		pos ^= c
		if pos >= uint32(len(u)) {
			break
		}
		unit := u[pos]
		if unit&((1<<31)|0xff) != c {
			break
		}
		pos ^= offset(unit)
		if pos >= uint32(len(u)) {
			break
		}
		if (unit>>8)&1 == 1 {
			bestLen, bestVal = i+1, u[pos]&((1<<31)-1)
		}
	}
	if bestLen == 0 || int(bestVal) >= len(m.normalized) {
		return "", 0
	}
	rest := m.normalized[bestVal:]
	end := 0
	for end < len(rest) && rest[end] != 0 {
		end++
	}
	return string(rest[:end]), bestLen
}

// loadSentencePieceJSON reads the tokenizer.json form of a SentencePiece
// BPE model: model BPE with byte_fallback, whitespace as "▁" by the
// normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] or the Metaspace
// pre-tokenizer (split false; prepend_scheme always, first or never),
// added tokens split out first.
func loadSentencePieceJSON(raw []byte, path string) (*SentencePiece, error) {
	var f struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Model         struct {
			Type         string          `json:"type"`
			Vocab        json.RawMessage `json:"vocab"`
			Merges       json.RawMessage `json:"merges"`
			ByteFallback bool            `json:"byte_fallback"`
			UnkToken     *string         `json:"unk_token"`
			IgnoreMerges bool            `json:"ignore_merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnsupported, path, err)
	}
	if f.Model.Type != "BPE" || !f.Model.ByteFallback || f.Model.IgnoreMerges {
		return nil, fmt.Errorf("%w: %s: model %s: only BPE with byte fallback is implemented for SentencePiece-style files", ErrUnsupported, path, f.Model.Type)
	}
	t := &SentencePiece{ids: map[string]int{}, user: map[byte][]addedToken{}, splitAdded: true, escapeWS: true, unk: -1}
	if err := t.jsonWhitespace(f.Normalizer, f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnsupported, path, err)
	}
	vocab, err := scanVocab(f.Model.Vocab)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: vocab: %v", ErrUnsupported, path, err)
	}
	ms, err := scanMerges(f.Model.Merges)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: merges: %v", ErrUnsupported, path, err)
	}
	t.ranks = make(map[string]int, len(ms))
	for i, m := range ms {
		if _, dup := t.ranks[m]; !dup {
			t.ranks[m] = i
		}
	}
	size := 0
	for _, id := range vocab {
		size = max(size, id+1)
	}
	for _, a := range f.AddedTokens {
		size = max(size, a.ID+1)
	}
	if size > 1<<24 {
		return nil, fmt.Errorf("%w: %s: vocabulary of %d", ErrUnsupported, path, size)
	}
	pieces := make([]string, size)
	t.scores = make([]float32, size)
	t.types = make([]int8, size)
	for p, id := range vocab {
		if id >= 0 {
			pieces[id], t.types[id] = p, spNormal
		}
	}
	for id, p := range pieces {
		if len(p) == 6 && strings.HasPrefix(p, "<0x") && p[5] == '>' {
			t.types[id] = spByte
		}
	}
	if f.Model.UnkToken != nil {
		if id, ok := vocab[*f.Model.UnkToken]; ok {
			t.types[id] = spUnknown
		}
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.Content == "" {
			continue
		}
		pieces[a.ID] = a.Content
		if t.types[a.ID] != spUnknown {
			t.types[a.ID] = spUserDefined
		}
	}
	for id := range pieces {
		if t.types[id] == 0 {
			t.types[id] = spUnused
		}
	}
	t.byteFallback = true
	if f.Model.UnkToken == nil {
		// index wants an unknown piece; with byte fallback it is never
		// produced: a placeholder no text can spell
		t.types = append(t.types, spUnknown)
		t.scores = append(t.scores, 0)
		pieces = append(pieces, "\x00<unk>")
	}
	if err := t.index(pieces); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// every added token splits the text, the unknown piece's too
	t.user = map[byte][]addedToken{}
	for _, a := range f.AddedTokens {
		if a.ID >= 0 && a.Content != "" {
			t.user[a.Content[0]] = append(t.user[a.Content[0]], addedToken{content: a.Content, id: a.ID})
		}
	}
	for _, l := range t.user {
		sort.Slice(l, func(i, j int) bool { return len(l[i].content) > len(l[j].content) })
	}
	t.prefix = templatePrefix(f.PostProcessor)
	return t, nil
}

// jsonWhitespace reads the whitespace handling of a SentencePiece-style
// tokenizer.json into the SentencePiece normalizer's flags.
func (t *SentencePiece) jsonWhitespace(normalizer, preTokenizer json.RawMessage) error {
	type step struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Prepend     string            `json:"prepend"`
		Pattern     struct {
			String *string `json:"String"`
		} `json:"pattern"`
		Content       string `json:"content"`
		Replacement   string `json:"replacement"`
		AddPrefix     *bool  `json:"add_prefix_space"`
		PrependScheme string `json:"prepend_scheme"`
		Split         *bool  `json:"split"`
	}
	null := func(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }
	switch {
	case !null(normalizer) && null(preTokenizer):
		var n step
		if err := json.Unmarshal(normalizer, &n); err != nil {
			return err
		}
		if n.Type != "Sequence" {
			return fmt.Errorf("normalizer %s", n.Type)
		}
		prepend, replace := false, false
		for _, r := range n.Normalizers {
			var s step
			if err := json.Unmarshal(r, &s); err != nil {
				return err
			}
			switch {
			case s.Type == "Prepend" && s.Prepend == spaceSymbol:
				prepend = true
			case s.Type == "Replace" && s.Pattern.String != nil && *s.Pattern.String == " " && s.Content == spaceSymbol:
				replace = true
			default:
				return fmt.Errorf("normalizer step %s", s.Type)
			}
		}
		if !replace {
			return errors.New("normalizer does not escape spaces")
		}
		t.addDummyPrefix = prepend
	case null(normalizer) && !null(preTokenizer):
		var p step
		if err := json.Unmarshal(preTokenizer, &p); err != nil {
			return err
		}
		if p.Type != "Metaspace" || p.Replacement != spaceSymbol {
			return fmt.Errorf("pre_tokenizer %s", p.Type)
		}
		if p.Split == nil || *p.Split {
			return errors.New("Metaspace splitting into words")
		}
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
	default:
		return errors.New("neither a Prepend/Replace normalizer nor a Metaspace pre-tokenizer")
	}
	return nil
}

// PromptEncoder is a tokenizer loaded from a model's file.
type PromptEncoder interface {
	// Encode returns text's ids without special tokens around it.
	Encode(text string) []int
	// EncodePrompt is Encode after the tokens the model puts before a
	// prompt (its BOS).
	EncodePrompt(text string) []int
}

// LoadFile loads a model's tokenizer: a SentencePiece tokenizer.model, or
// a tokenizer.json of the byte-level BPE family (BPE), of a SentencePiece
// BPE with byte fallback, or of a SentencePiece unigram (SentencePiece).
func LoadFile(path string) (PromptEncoder, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	trimmed := strings.TrimLeft(string(raw[:min(len(raw), 64)]), " \t\r\n")
	if !strings.HasPrefix(trimmed, "{") {
		t, err := ParseSentencePiece(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return t, nil
	}
	var probe struct {
		Model struct {
			Type         string `json:"type"`
			ByteFallback bool   `json:"byte_fallback"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnsupported, path, err)
	}
	if probe.Model.Type == "Unigram" {
		return loadUnigramJSON(raw, path)
	}
	if probe.Model.ByteFallback {
		return loadSentencePieceJSON(raw, path)
	}
	return LoadBPE(path)
}
