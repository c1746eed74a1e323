package model

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
)

// Layer holds one decoder layer's weights. Matrices are row-major
// [out][in], as Hugging Face stores nn.Linear weights.
type Layer struct {
	AttnNorm []float32 // [hidden]
	Wq       []float32 // [heads*dim][hidden]
	Wk       []float32 // [kvHeads*dim][hidden]
	Wv       []float32 // [kvHeads*dim][hidden]
	Wo       []float32 // [hidden][heads*dim]
	MLPNorm  []float32 // [hidden]
	Wgate    []float32 // [inter][hidden]
	Wup      []float32 // [inter][hidden]
	Wdown    []float32 // [hidden][inter]
}

// Model is a Llama-architecture decoder in float32.
type Model struct {
	Name   string
	Config Config
	Embed  []float32 // [vocab][hidden]
	Layers []Layer
	Norm   []float32 // [hidden]
	LMHead []float32 // [vocab][hidden]; aliases Embed when tied

	// Workers is the number of goroutines a forward pass spreads over
	// (default GOMAXPROCS). It never changes results.
	Workers int

	cos, sin []float32 // [maxPos][dim/2]
}

// Tensor is one named weight and its shape.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// Tensors lists the model's weights under Hugging Face Llama names, in a
// fixed order. Data aliases the model.
func (m *Model) Tensors() []Tensor {
	c := m.Config
	h, d := c.HiddenSize, c.Dim()
	q, kv := c.NumAttentionHeads*d, c.NumKeyValueHeads*d
	ts := []Tensor{{"model.embed_tokens.weight", []int{c.VocabSize, h}, m.Embed}}
	for i := range m.Layers {
		l := &m.Layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts,
			Tensor{p + "input_layernorm.weight", []int{h}, l.AttnNorm},
			Tensor{p + "self_attn.q_proj.weight", []int{q, h}, l.Wq},
			Tensor{p + "self_attn.k_proj.weight", []int{kv, h}, l.Wk},
			Tensor{p + "self_attn.v_proj.weight", []int{kv, h}, l.Wv},
			Tensor{p + "self_attn.o_proj.weight", []int{h, q}, l.Wo},
			Tensor{p + "post_attention_layernorm.weight", []int{h}, l.MLPNorm},
			Tensor{p + "mlp.gate_proj.weight", []int{c.IntermediateSize, h}, l.Wgate},
			Tensor{p + "mlp.up_proj.weight", []int{c.IntermediateSize, h}, l.Wup},
			Tensor{p + "mlp.down_proj.weight", []int{h, c.IntermediateSize}, l.Wdown},
		)
	}
	ts = append(ts, Tensor{"model.norm.weight", []int{h}, m.Norm})
	if !c.TieWordEmbeddings {
		ts = append(ts, Tensor{"lm_head.weight", []int{c.VocabSize, h}, m.LMHead})
	}
	return ts
}

// NumParams counts the model's parameters.
func (m *Model) NumParams() int {
	n := 0
	for _, t := range m.Tensors() {
		n += len(t.Data)
	}
	return n
}

// allocate creates zeroed weights for c.
func allocate(name string, c Config) *Model {
	h, d := c.HiddenSize, c.Dim()
	q, kv := c.NumAttentionHeads*d, c.NumKeyValueHeads*d
	m := &Model{Name: name, Config: c, Embed: make([]float32, c.VocabSize*h), Norm: make([]float32, h)}
	for range c.NumHiddenLayers {
		m.Layers = append(m.Layers, Layer{
			AttnNorm: make([]float32, h), Wq: make([]float32, q*h), Wk: make([]float32, kv*h), Wv: make([]float32, kv*h),
			Wo: make([]float32, h*q), MLPNorm: make([]float32, h), Wgate: make([]float32, c.IntermediateSize*h),
			Wup: make([]float32, c.IntermediateSize*h), Wdown: make([]float32, h*c.IntermediateSize),
		})
	}
	if c.TieWordEmbeddings {
		m.LMHead = m.Embed
	} else {
		m.LMHead = make([]float32, c.VocabSize*h)
	}
	return m
}

func (m *Model) initRope() {
	c := m.Config
	half := c.Dim() / 2
	m.cos = make([]float32, c.MaxPositionEmbeddings*half)
	m.sin = make([]float32, c.MaxPositionEmbeddings*half)
	for p := 0; p < c.MaxPositionEmbeddings; p++ {
		for i := 0; i < half; i++ {
			inv := math.Pow(c.RopeTheta, -float64(2*i)/float64(c.Dim()))
			a := float64(p) * inv
			m.cos[p*half+i] = float32(math.Cos(a))
			m.sin[p*half+i] = float32(math.Sin(a))
		}
	}
}

// NewRandom builds a model with deterministic pseudo-random weights: the
// same (config, seed) always gives the same bits on every platform. Each
// tensor has its own generator seeded from SHA-256(seed, tensor name); values
// are uniform in [-s/sqrt(fan_in), s/sqrt(fan_in)) with s = 4 for the q, k,
// o and down projections and 1 otherwise; embeddings in [-0.05, 0.05); norm
// weights are 1.
func NewRandom(name string, c Config, seed uint64) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := allocate(name, c)
	for _, t := range m.Tensors() {
		if len(t.Shape) == 1 {
			for i := range t.Data {
				t.Data[i] = 1
			}
			continue
		}
		scale := float32(1 / math.Sqrt(float64(t.Shape[1])))
		switch {
		case t.Name == "model.embed_tokens.weight":
			scale = 0.05
		case strings.HasSuffix(t.Name, "o_proj.weight") || strings.HasSuffix(t.Name, "down_proj.weight"),
			strings.HasSuffix(t.Name, "q_proj.weight") || strings.HasSuffix(t.Name, "k_proj.weight"):
			// Larger residual writes and sharper attention make the random
			// model chaotic: its output depends on every cached K/V, so a
			// wrong KV block changes the generated tokens.
			scale *= 4
		}
		var sb [8]byte
		binary.LittleEndian.PutUint64(sb[:], seed)
		sum := sha256.Sum256(append(sb[:], t.Name...))
		state := binary.LittleEndian.Uint64(sum[:8])
		for i := range t.Data {
			state += 0x9e3779b97f4a7c15
			z := state
			z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
			z = (z ^ (z >> 27)) * 0x94d049bb133111eb
			z ^= z >> 31
			u := float32(z>>40) / float32(1<<24) // [0,1)
			t.Data[i] = (2*u - 1) * scale
		}
	}
	m.initRope()
	return m, nil
}

// NewBuiltin builds a built-in configuration with deterministic random weights.
func NewBuiltin(name string, seed uint64) (*Model, error) {
	c, err := Builtin(name)
	if err != nil {
		return nil, err
	}
	return NewRandom(name, c, seed)
}

// KVBytesPerToken is the KV cache size of one token over all layers (float32 K and V).
func (c *Config) KVBytesPerToken() int {
	return 2 * c.NumHiddenLayers * c.NumKeyValueHeads * c.Dim() * 4
}

// Fingerprint is a hex SHA-256 prefix over the architecture and every
// weight's name, shape and float32 bits: equal fingerprints mean the same
// model, bit for bit.
func (m *Model) Fingerprint() string {
	h := sha256.New()
	cfg := m.Config
	fmt.Fprintf(h, "%d|%d|%d|%d|%d|%d|%d|%g|%g|", cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers,
		cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.Dim(), cfg.VocabSize, cfg.RMSNormEps, cfg.RopeTheta)
	var buf []byte
	for _, t := range m.Tensors() {
		fmt.Fprintf(h, "%s%v|", t.Name, t.Shape)
		buf = buf[:0]
		for _, v := range t.Data {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
