package model

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// ErrFormat reports a malformed safetensors file.
var ErrFormat = errors.New("model: bad safetensors file")

// maxHeader bounds the JSON header we accept (100 MB, as the reference
// implementation does).
const maxHeader = 100 << 20

// STEntry is one tensor in a safetensors header.
type STEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// ParseSafetensorsHeader decodes and checks the header at the start of a
// safetensors file whose total size is fileSize. It returns the entries and
// the offset of the data section. Every entry is checked to lie inside the
// file, to have a supported dtype, and to have a byte size that matches its
// shape.
func ParseSafetensorsHeader(head []byte, fileSize int64) (map[string]STEntry, int64, error) {
	if len(head) < 8 {
		return nil, 0, fmt.Errorf("%w: shorter than 8 bytes", ErrFormat)
	}
	n := binary.LittleEndian.Uint64(head[:8])
	if n > maxHeader || int64(n)+8 > fileSize || uint64(len(head)) < 8+n {
		return nil, 0, fmt.Errorf("%w: header length %d does not fit", ErrFormat, n)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(head[8:8+n], &raw); err != nil {
		return nil, 0, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	dataStart := int64(8 + n)
	dataLen := fileSize - dataStart
	out := make(map[string]STEntry, len(raw))
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var e STEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, 0, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
		}
		es, ok := dtypeSize[e.DType]
		if !ok {
			return nil, 0, fmt.Errorf("%w: tensor %q has dtype %s (supported: F32, F16, BF16)", ErrUnsupported, name, e.DType)
		}
		elems := int64(1)
		for _, d := range e.Shape {
			if d < 0 || d > 1<<31 {
				return nil, 0, fmt.Errorf("%w: tensor %q has bad shape %v", ErrFormat, name, e.Shape)
			}
			elems *= int64(d)
			if elems > 1<<40 {
				return nil, 0, fmt.Errorf("%w: tensor %q too large", ErrFormat, name)
			}
		}
		b, en := e.DataOffsets[0], e.DataOffsets[1]
		if b < 0 || en < b || en > dataLen || en-b != elems*int64(es) {
			return nil, 0, fmt.Errorf("%w: tensor %q offsets %v do not match shape %v (%s) within %d data bytes",
				ErrFormat, name, e.DataOffsets, e.Shape, e.DType, dataLen)
		}
		out[name] = e
	}
	return out, dataStart, nil
}

var dtypeSize = map[string]int{"F32": 4, "F16": 2, "BF16": 2}

// decodeFloats converts raw little-endian data of dtype into dst.
func decodeFloats(dtype string, raw []byte, dst []float32) {
	switch dtype {
	case "F32":
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case "BF16":
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
	case "F16":
		for i := range dst {
			dst[i] = f16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	}
}

func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		for mant&0x400 == 0 {
			mant <<= 1
			exp--
		}
		exp++
		mant &= 0x3ff
		return math.Float32frombits(sign | uint32(exp+127-15)<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | uint32(exp+127-15)<<23 | mant<<13)
}

// F32ToF16 converts with round-to-nearest-even (used by tests and by Save
// with dtype F16).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case int32(b>>23&0xff) == 0xff:
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		if rem := mant & (1<<shift - 1); rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(exp)<<10 | mant>>13
	if rem := mant & 0x1fff; rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}

// F32ToBF16 converts with round-to-nearest-even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// Save writes the model as a Hugging Face style directory: config.json and
// model.safetensors with Llama tensor names. dtype is "F32" (exact), "F16"
// or "BF16".
func (m *Model) Save(dir, dtype string) error {
	es, ok := dtypeSize[dtype]
	if !ok {
		return fmt.Errorf("model: save dtype %q (want F32, F16 or BF16)", dtype)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c := m.Config
	c.TorchDtype = map[string]string{"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
	cj, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(cj, '\n'), 0o644); err != nil {
		return err
	}
	tensors := m.Tensors()
	header := map[string]any{"__metadata__": map[string]string{"format": "pt", "writer": "mooncake-go"}}
	var off int64
	for _, t := range tensors {
		n := int64(len(t.Data) * es)
		header[t.Name] = STEntry{DType: dtype, Shape: t.Shape, DataOffsets: [2]int64{off, off + n}}
		off += n
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	defer f.Close()
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], uint64(len(hj)))
	if _, err := f.Write(append(lb[:], hj...)); err != nil {
		return err
	}
	for _, t := range tensors {
		buf := make([]byte, len(t.Data)*es)
		for i, v := range t.Data {
			switch dtype {
			case "F32":
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
			case "F16":
				binary.LittleEndian.PutUint16(buf[2*i:], F32ToF16(v))
			case "BF16":
				binary.LittleEndian.PutUint16(buf[2*i:], F32ToBF16(v))
			}
		}
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return f.Close()
}

// Load reads a Hugging Face style Llama directory: config.json and
// model.safetensors (a single file; sharded checkpoints are rejected with a
// clear error). Tensors may be F32, F16 or BF16; they are converted to F32.
func Load(dir string) (*Model, error) {
	cj, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("model: %s is not a model directory: %w", dir, err)
	}
	var c Config
	if err := json.Unmarshal(cj, &c); err != nil {
		return nil, fmt.Errorf("%w: config.json: %v", ErrUnsupported, err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "model.safetensors")
	f, err := os.Open(path)
	if err != nil {
		if _, e2 := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); e2 == nil {
			return nil, fmt.Errorf("%w: sharded safetensors checkpoints are not supported; merge into one model.safetensors", ErrUnsupported)
		}
		return nil, fmt.Errorf("model: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var lb [8]byte
	if _, err := io.ReadFull(f, lb[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	hn := binary.LittleEndian.Uint64(lb[:])
	if hn > maxHeader || int64(hn)+8 > st.Size() {
		return nil, fmt.Errorf("%w: header length %d does not fit", ErrFormat, hn)
	}
	head := make([]byte, 8+hn)
	copy(head, lb[:])
	if _, err := io.ReadFull(f, head[8:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	entries, dataStart, err := ParseSafetensorsHeader(head, st.Size())
	if err != nil {
		return nil, err
	}
	m := allocate(filepath.Base(filepath.Clean(dir)), c)
	want := m.Tensors()
	if c.TieWordEmbeddings {
		if _, ok := entries["lm_head.weight"]; ok {
			// Some tied checkpoints still carry lm_head; load it separately.
			m.LMHead = make([]float32, len(m.Embed))
			m.Config.TieWordEmbeddings = false
			want = m.Tensors()
		}
	}
	seen := map[string]bool{}
	for _, t := range want {
		e, ok := entries[t.Name]
		if !ok {
			return nil, fmt.Errorf("%w: tensor %s missing", ErrUnsupported, t.Name)
		}
		if !slices.Equal(e.Shape, t.Shape) {
			return nil, fmt.Errorf("%w: tensor %s has shape %v, config says %v", ErrUnsupported, t.Name, e.Shape, t.Shape)
		}
		raw := make([]byte, e.DataOffsets[1]-e.DataOffsets[0])
		if _, err := f.ReadAt(raw, dataStart+e.DataOffsets[0]); err != nil {
			return nil, fmt.Errorf("%w: tensor %s: %v", ErrFormat, t.Name, err)
		}
		decodeFloats(e.DType, raw, t.Data)
		seen[t.Name] = true
	}
	var extra []string
	for name := range entries {
		if !seen[name] && !isIgnorable(name) {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, fmt.Errorf("%w: unexpected tensors %v (not a plain Llama checkpoint)", ErrUnsupported, extra)
	}
	m.initRope()
	return m, nil
}

func isIgnorable(name string) bool {
	return strings.HasSuffix(name, "rotary_emb.inv_freq")
}
