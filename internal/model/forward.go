package model

import (
	"errors"
	"fmt"
	"math"
	"runtime"
)

// KV is the paged KV cache as the model sees it.
type KV interface {
	// Block returns the K and V halves of block id in layer, each
	// float32[blockSize][kvHeads][headDim].
	Block(layer, id int) (k, v []float32)
}

// Seq is one sequence's share of a forward pass: compute Tokens at
// positions Start.. and store their K/V through BlockTable.
type Seq struct {
	Tokens     []int
	Start      int
	BlockTable []int // block i holds positions [i*blockSize, (i+1)*blockSize)
	Logits     bool  // return the logits of the last token
}

// Hooks are called once per layer, in layer order.
type Hooks struct {
	// BeforeAttention runs after Q/K/V of the layer are computed and before
	// this pass's K/V are written to the cache and attention reads it.
	BeforeAttention func(layer int) error
	// KVStored runs as soon as the layer's K/V of this pass are in the
	// cache, before attention reads them (they are not written again): a
	// layer-wise KV transfer of the layer can start while its attention
	// and MLP compute.
	KVStored func(layer int) error
	// AfterAttention runs once the layer's attention of this pass is done.
	AfterAttention func(layer int) error
}

// ErrInput reports a Seq the model cannot run.
var ErrInput = errors.New("model: bad forward input")

// Forward runs the model over seqs and returns, for every Seq with Logits,
// the vocabulary logits of its last token (nil for the others). Each Seq's
// results depend only on its own tokens and the cache contents of positions
// before Start, never on the other Seqs or on how its tokens were chunked.
func (m *Model) Forward(seqs []Seq, kv KV, blockSize int, hooks Hooks) ([][]float32, error) {
	rows, err := m.rowsOf(seqs, blockSize)
	if err != nil {
		return nil, err
	}
	p := m.newPass(seqs, kv, blockSize, rows)
	for l := range m.Layers {
		if err := p.attention(l, hooks); err != nil {
			return nil, err
		}
		p.mlp(l)
	}
	return p.logits(), nil
}

// row is one token of a pass: its Seq and position.
type row struct{ seq, pos int }

// rowsOf checks seqs and lists their tokens in order.
func (m *Model) rowsOf(seqs []Seq, blockSize int) ([]row, error) {
	c := &m.Config
	var rows []row
	for si, s := range seqs {
		if len(s.Tokens) == 0 {
			return nil, fmt.Errorf("%w: seq %d has no tokens", ErrInput, si)
		}
		end := s.Start + len(s.Tokens)
		if s.Start < 0 || end > c.MaxPositionEmbeddings {
			return nil, fmt.Errorf("%w: positions [%d,%d) outside the context of %d", ErrInput, s.Start, end, c.MaxPositionEmbeddings)
		}
		if (end+blockSize-1)/blockSize > len(s.BlockTable) {
			return nil, fmt.Errorf("%w: seq %d needs %d blocks, table has %d", ErrInput, si, (end+blockSize-1)/blockSize, len(s.BlockTable))
		}
		for i, t := range s.Tokens {
			if t < 0 || t >= c.VocabSize {
				return nil, fmt.Errorf("%w: token %d outside vocabulary of %d", ErrInput, t, c.VocabSize)
			}
			rows = append(rows, row{si, s.Start + i})
		}
	}
	return rows, nil
}

// pass is one forward pass: its rows, the residual stream x and the
// scratch buffers of every layer.
type pass struct {
	m         *Model
	seqs      []Seq
	kv        KV
	blockSize int
	rows      []row

	x, xn, q, k, v, att, o, g, u []float32
	maxLen                       int
	scratch                      [][]float32 // per worker: attention scores
}

// newPass allocates the buffers and embeds the tokens into x.
func (m *Model) newPass(seqs []Seq, kv KV, blockSize int, rows []row) *pass {
	c := &m.Config
	H, D := c.HiddenSize, c.Dim()
	qd, kvd := c.NumAttentionHeads*D, c.NumKeyValueHeads*D
	I := c.IntermediateSize
	T := len(rows)
	p := &pass{m: m, seqs: seqs, kv: kv, blockSize: blockSize, rows: rows,
		x: make([]float32, T*H), xn: make([]float32, T*H), q: make([]float32, T*qd),
		k: make([]float32, T*kvd), v: make([]float32, T*kvd), att: make([]float32, T*qd),
		o: make([]float32, T*H), g: make([]float32, T*I), u: make([]float32, T*I)}
	ti := 0
	for _, s := range seqs {
		for _, t := range s.Tokens {
			copy(p.x[ti*H:(ti+1)*H], m.Embed[t*H:(t+1)*H])
			ti++
		}
	}
	for _, r := range rows {
		p.maxLen = max(p.maxLen, r.pos+1)
	}
	workers := m.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p.scratch = make([][]float32, workers)
	return p
}

// attention is layer l's attention block: Q/K/V with RoPE, the hooks around
// writing this pass's K/V into the cache, attention over the cache, and the
// output projection added to x.
func (p *pass) attention(l int, hooks Hooks) error {
	m, c, L, w := p.m, &p.m.Config, &p.m.Layers[l], p.m.Workers
	H, D, T := c.HiddenSize, c.Dim(), len(p.rows)
	nh, nkv := c.NumAttentionHeads, c.NumKeyValueHeads
	qd, kvd := nh*D, nkv*D
	half := D / 2
	rmsnorm(w, p.xn, p.x, L.AttnNorm, T, H, c.RMSNormEps)
	matmul(w, p.q, p.xn, L.Wq, T, H, qd)
	matmul(w, p.k, p.xn, L.Wk, T, H, kvd)
	matmul(w, p.v, p.xn, L.Wv, T, H, kvd)
	parFor(w, T, func(_, r int) {
		pos := p.rows[r].pos
		rope(p.q[r*qd:(r+1)*qd], nh, D, m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half])
		rope(p.k[r*kvd:(r+1)*kvd], nkv, D, m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half])
	})
	if hooks.BeforeAttention != nil {
		if err := hooks.BeforeAttention(l); err != nil {
			return err
		}
	}
	p.writeKV(l)
	if hooks.KVStored != nil {
		if err := hooks.KVStored(l); err != nil {
			return err
		}
	}
	parFor(w, T*nh, func(wk, item int) { p.attendHead(l, wk, item/nh, item%nh) })
	if hooks.AfterAttention != nil {
		if err := hooks.AfterAttention(l); err != nil {
			return err
		}
	}
	matmul(w, p.o, p.att, L.Wo, T, qd, H)
	for i := range p.x {
		p.x[i] += p.o[i]
	}
	return nil
}

// writeKV stores this pass's K/V of layer l in the cache.
func (p *pass) writeKV(l int) {
	kvd := p.m.Config.NumKeyValueHeads * p.m.Config.Dim()
	for r, ri := range p.rows {
		s := &p.seqs[ri.seq]
		kb, vb := p.kv.Block(l, s.BlockTable[ri.pos/p.blockSize])
		slot := ri.pos % p.blockSize
		copy(kb[slot*kvd:(slot+1)*kvd], p.k[r*kvd:(r+1)*kvd])
		copy(vb[slot*kvd:(slot+1)*kvd], p.v[r*kvd:(r+1)*kvd])
	}
}

// attendHead computes head h of row r in layer l (worker wk's scratch):
// softmax of the scaled scores over positions 0..pos, then the weighted sum
// of the values, keys and values read in ascending position order.
func (p *pass) attendHead(l, wk, r, h int) {
	c := &p.m.Config
	D := c.Dim()
	nh, nkv := c.NumAttentionHeads, c.NumKeyValueHeads
	qd, kvd := nh*D, nkv*D
	scale := float32(1 / math.Sqrt(float64(D)))
	blockSize := p.blockSize
	ri := p.rows[r]
	table := p.seqs[ri.seq].BlockTable
	kh := h / (nh / nkv)
	if len(p.scratch[wk]) < p.maxLen {
		p.scratch[wk] = make([]float32, p.maxLen)
	}
	sc := p.scratch[wk][:ri.pos+1]
	qv := p.q[r*qd+h*D : r*qd+(h+1)*D]
	mx := float32(math.Inf(-1))
	// Keys in ascending position order, one block at a time.
	for j0 := 0; j0 <= ri.pos; j0 += blockSize {
		kb, _ := p.kv.Block(l, table[j0/blockSize])
		for j := j0; j <= ri.pos && j < j0+blockSize; j++ {
			off := (j-j0)*kvd + kh*D
			s := dot(qv, kb[off:off+D]) * scale
			sc[j] = s
			if s > mx {
				mx = s
			}
		}
	}
	var sum float32
	for j := range sc {
		e := float32(math.Exp(float64(sc[j] - mx)))
		sc[j] = e
		sum += e
	}
	out := p.att[r*qd+h*D : r*qd+(h+1)*D]
	for d := range out {
		out[d] = 0
	}
	for j0 := 0; j0 <= ri.pos; j0 += blockSize {
		_, vb := p.kv.Block(l, table[j0/blockSize])
		for j := j0; j <= ri.pos && j < j0+blockSize; j++ {
			off := (j-j0)*kvd + kh*D
			e := sc[j]
			vv := vb[off : off+D]
			for d := range out {
				out[d] += e * vv[d]
			}
		}
	}
	inv := 1 / sum
	for d := range out {
		out[d] *= inv
	}
}

// mlp is layer l's SwiGLU block, added to x.
func (p *pass) mlp(l int) {
	c, L, w := &p.m.Config, &p.m.Layers[l], p.m.Workers
	H, I, T := c.HiddenSize, c.IntermediateSize, len(p.rows)
	rmsnorm(w, p.xn, p.x, L.MLPNorm, T, H, c.RMSNormEps)
	matmul(w, p.g, p.xn, L.Wgate, T, H, I)
	matmul(w, p.u, p.xn, L.Wup, T, H, I)
	for i := range p.g {
		p.g[i] = silu(p.g[i]) * p.u[i]
	}
	matmul(w, p.o, p.g, L.Wdown, T, I, H)
	for i := range p.x {
		p.x[i] += p.o[i]
	}
}

// logits returns the logits of the last row of each Seq that asks for them.
func (p *pass) logits() [][]float32 {
	m, c, w := p.m, &p.m.Config, p.m.Workers
	H := c.HiddenSize
	out := make([][]float32, len(p.seqs))
	var lastRows []int
	var lastSeqs []int
	r := 0
	for si, s := range p.seqs {
		r += len(s.Tokens)
		if s.Logits {
			lastRows = append(lastRows, r-1)
			lastSeqs = append(lastSeqs, si)
		}
	}
	if len(lastRows) == 0 {
		return out
	}
	n := len(lastRows)
	hs := make([]float32, n*H)
	for i, lr := range lastRows {
		copy(hs[i*H:(i+1)*H], p.x[lr*H:(lr+1)*H])
	}
	hn := make([]float32, n*H)
	rmsnorm(w, hn, hs, m.Norm, n, H, c.RMSNormEps)
	logits := make([]float32, n*c.VocabSize)
	matmul(w, logits, hn, m.LMHead, n, H, c.VocabSize)
	for i, si := range lastSeqs {
		out[si] = logits[i*c.VocabSize : (i+1)*c.VocabSize : (i+1)*c.VocabSize]
	}
	return out
}
