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
	// AfterAttention runs once the layer's K/V of this pass are in the cache.
	AfterAttention func(layer int) error
}

// ErrInput reports a Seq the model cannot run.
var ErrInput = errors.New("model: bad forward input")

// Forward runs the model over seqs and returns, for every Seq with Logits,
// the vocabulary logits of its last token (nil for the others). Each Seq's
// results depend only on its own tokens and the cache contents of positions
// before Start, never on the other Seqs or on how its tokens were chunked.
func (m *Model) Forward(seqs []Seq, kv KV, blockSize int, hooks Hooks) ([][]float32, error) {
	c := &m.Config
	H, D := c.HiddenSize, c.Dim()
	nh, nkv := c.NumAttentionHeads, c.NumKeyValueHeads
	qd, kvd := nh*D, nkv*D
	I := c.IntermediateSize
	type rowInfo struct{ seq, pos int }
	var rows []rowInfo
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
			rows = append(rows, rowInfo{si, s.Start + i})
		}
	}
	T := len(rows)
	w := m.Workers
	x := make([]float32, T*H)
	ti := 0
	for _, s := range seqs {
		for _, t := range s.Tokens {
			copy(x[ti*H:(ti+1)*H], m.Embed[t*H:(t+1)*H])
			ti++
		}
	}
	xn := make([]float32, T*H)
	q := make([]float32, T*qd)
	k := make([]float32, T*kvd)
	v := make([]float32, T*kvd)
	att := make([]float32, T*qd)
	o := make([]float32, T*H)
	g := make([]float32, T*I)
	u := make([]float32, T*I)
	half := D / 2
	scale := float32(1 / math.Sqrt(float64(D)))
	group := nh / nkv
	maxLen := 0
	for _, r := range rows {
		maxLen = max(maxLen, r.pos+1)
	}
	workers := w
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	scratch := make([][]float32, workers)
	for l := range m.Layers {
		L := &m.Layers[l]
		rmsnorm(w, xn, x, L.AttnNorm, T, H, c.RMSNormEps)
		matmul(w, q, xn, L.Wq, T, H, qd)
		matmul(w, k, xn, L.Wk, T, H, kvd)
		matmul(w, v, xn, L.Wv, T, H, kvd)
		parFor(w, T, func(_, r int) {
			p := rows[r].pos
			rope(q[r*qd:(r+1)*qd], nh, D, m.cos[p*half:(p+1)*half], m.sin[p*half:(p+1)*half])
			rope(k[r*kvd:(r+1)*kvd], nkv, D, m.cos[p*half:(p+1)*half], m.sin[p*half:(p+1)*half])
		})
		if hooks.BeforeAttention != nil {
			if err := hooks.BeforeAttention(l); err != nil {
				return nil, err
			}
		}
		for r, ri := range rows {
			s := &seqs[ri.seq]
			kb, vb := kv.Block(l, s.BlockTable[ri.pos/blockSize])
			slot := ri.pos % blockSize
			copy(kb[slot*kvd:(slot+1)*kvd], k[r*kvd:(r+1)*kvd])
			copy(vb[slot*kvd:(slot+1)*kvd], v[r*kvd:(r+1)*kvd])
		}
		parFor(w, T*nh, func(wk, item int) {
			r, h := item/nh, item%nh
			ri := rows[r]
			table := seqs[ri.seq].BlockTable
			kh := h / group
			if len(scratch[wk]) < maxLen {
				scratch[wk] = make([]float32, maxLen)
			}
			sc := scratch[wk][:ri.pos+1]
			qv := q[r*qd+h*D : r*qd+(h+1)*D]
			mx := float32(math.Inf(-1))
			// Keys in ascending position order, one block at a time.
			for j0 := 0; j0 <= ri.pos; j0 += blockSize {
				kb, _ := kv.Block(l, table[j0/blockSize])
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
			out := att[r*qd+h*D : r*qd+(h+1)*D]
			for d := range out {
				out[d] = 0
			}
			for j0 := 0; j0 <= ri.pos; j0 += blockSize {
				_, vb := kv.Block(l, table[j0/blockSize])
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
		})
		if hooks.AfterAttention != nil {
			if err := hooks.AfterAttention(l); err != nil {
				return nil, err
			}
		}
		matmul(w, o, att, L.Wo, T, qd, H)
		for i := range x {
			x[i] += o[i]
		}
		rmsnorm(w, xn, x, L.MLPNorm, T, H, c.RMSNormEps)
		matmul(w, g, xn, L.Wgate, T, H, I)
		matmul(w, u, xn, L.Wup, T, H, I)
		for i := range g {
			g[i] = silu(g[i]) * u[i]
		}
		matmul(w, o, g, L.Wdown, T, I, H)
		for i := range x {
			x[i] += o[i]
		}
	}
	// Logits for the last row of each Seq that asks for them.
	out := make([][]float32, len(seqs))
	var lastRows []int
	var lastSeqs []int
	r := 0
	for si, s := range seqs {
		r += len(s.Tokens)
		if s.Logits {
			lastRows = append(lastRows, r-1)
			lastSeqs = append(lastSeqs, si)
		}
	}
	if len(lastRows) == 0 {
		return out, nil
	}
	n := len(lastRows)
	hs := make([]float32, n*H)
	for i, lr := range lastRows {
		copy(hs[i*H:(i+1)*H], x[lr*H:(lr+1)*H])
	}
	hn := make([]float32, n*H)
	rmsnorm(w, hn, hs, m.Norm, n, H, c.RMSNormEps)
	logits := make([]float32, n*c.VocabSize)
	matmul(w, logits, hn, m.LMHead, n, H, c.VocabSize)
	for i, si := range lastSeqs {
		out[si] = logits[i*c.VocabSize : (i+1)*c.VocabSize : (i+1)*c.VocabSize]
	}
	return out, nil
}
