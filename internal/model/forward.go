package model

import (
	"errors"
	"fmt"
	"math"
	"runtime"
)

// KV is the paged KV cache as the model sees it.
type KV interface {
	// Head returns the K and V of KV head h in block id of layer, each
	// float32[blockSize][headDim]. Under tensor parallelism rank r only
	// asks for its own heads (kvcache.Regions keeps them in r's regions).
	Head(layer, id, h int) (k, v []float32)
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
// It is ForwardTP with one rank.
func (m *Model) Forward(seqs []Seq, kv KV, blockSize int, hooks Hooks) ([][]float32, error) {
	return m.ForwardTP(1, seqs, kv, blockSize, hooks)
}

// ForwardTP is Forward with the layers split across tp tensor-parallel
// ranks (Megatron style): rank r owns KV heads [r*nkv/tp, (r+1)*nkv/tp),
// their query heads, the matching columns of o_proj, and its share of the
// MLP's intermediate dimension (rows of gate/up, columns of down). Each
// rank computes its Q/K/V, writes and reads only its own KV heads, and
// produces partial sums of o_proj and down_proj; the all-reduce adds the
// partials. The output is bit-identical for every tp (see Reduction in
// doc.go): the partials are per reduction group (a KV head's query heads
// for o_proj, a fixed slice of the intermediate dimension for down_proj,
// NumKeyValueHeads groups each), never per rank, and the all-reduce adds
// the groups in group order, so a one-rank pass computes exactly the same
// floating-point operations. tp must divide NumKeyValueHeads (ErrTP).
// Ranks run one after another on the pass's workers.
func (m *Model) ForwardTP(tp int, seqs []Seq, kv KV, blockSize int, hooks Hooks) ([][]float32, error) {
	if err := m.Config.CheckTP(tp); err != nil {
		return nil, err
	}
	rows, err := m.rowsOf(seqs, blockSize)
	if err != nil {
		return nil, err
	}
	p := m.newPass(tp, seqs, kv, blockSize, rows)
	for l := range m.Layers {
		if err := p.attention(l, hooks); err != nil {
			return nil, err
		}
		p.mlp(l)
	}
	return p.logits(), nil
}

// ErrTP reports a tensor-parallel size the model cannot be split into.
var ErrTP = errors.New("model: bad tensor-parallel size")

// CheckTP reports whether the model splits across tp ranks: tp must be
// positive and divide the KV head count.
func (c *Config) CheckTP(tp int) error {
	if tp <= 0 || c.NumKeyValueHeads%tp != 0 {
		return fmt.Errorf("%w: tp %d must divide the %d KV heads", ErrTP, tp, c.NumKeyValueHeads)
	}
	return nil
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

// pass is one forward pass: its rows, the residual stream x, the
// replicated scratch buffers and each rank's own.
type pass struct {
	m         *Model
	tp        int
	seqs      []Seq
	kv        KV
	blockSize int
	rows      []row

	x, xn   []float32
	part    [][]float32 // per reduction group: its partial sum of o_proj or down_proj, [T][hidden]
	ranks   []rankBufs
	maxLen  int
	scratch [][]float32 // per worker: attention scores
}

// rankBufs are one rank's activations: its heads' q, k, v, attention
// output, and its slice of the MLP's intermediate activations.
type rankBufs struct {
	q, k, v, att, g, u []float32
}

// groups is the number of reduction groups of o_proj and down_proj.
func (c *Config) groups() int { return c.NumKeyValueHeads }

// interBound is where reduction group g of the MLP's intermediate
// dimension starts (g == groups(): its end).
func (c *Config) interBound(g int) int { return g * c.IntermediateSize / c.groups() }

// newPass allocates the buffers and embeds the tokens into x.
func (m *Model) newPass(tp int, seqs []Seq, kv KV, blockSize int, rows []row) *pass {
	c := &m.Config
	H, D := c.HiddenSize, c.Dim()
	qd, kvd := c.NumAttentionHeads*D/tp, c.NumKeyValueHeads*D/tp
	T := len(rows)
	p := &pass{m: m, tp: tp, seqs: seqs, kv: kv, blockSize: blockSize, rows: rows,
		x: make([]float32, T*H), xn: make([]float32, T*H)}
	p.part = make([][]float32, c.groups())
	for g := range p.part {
		p.part[g] = make([]float32, T*H)
	}
	G := c.groups()
	for r := 0; r < tp; r++ {
		I := c.interBound((r+1)*G/tp) - c.interBound(r*G/tp)
		p.ranks = append(p.ranks, rankBufs{q: make([]float32, T*qd), k: make([]float32, T*kvd), v: make([]float32, T*kvd),
			att: make([]float32, T*qd), g: make([]float32, T*I), u: make([]float32, T*I)})
	}
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

// attention is layer l's attention block: per rank, Q/K/V of its heads
// with RoPE; the hooks around writing this pass's K/V into the cache;
// attention over the cache; each rank's o_proj partials; then the
// all-reduce added to x.
func (p *pass) attention(l int, hooks Hooks) error {
	m, c, L, w := p.m, &p.m.Config, &p.m.Layers[l], p.m.Workers
	H, D, T := c.HiddenSize, c.Dim(), len(p.rows)
	nh, nkv := c.NumAttentionHeads/p.tp, c.NumKeyValueHeads/p.tp // per rank
	qd, kvd := nh*D, nkv*D
	half := D / 2
	rmsnorm(w, p.xn, p.x, L.AttnNorm, T, H, c.RMSNormEps)
	for r := range p.ranks {
		rb := &p.ranks[r]
		matmul(w, rb.q, p.xn, L.Wq[r*qd*H:(r+1)*qd*H], T, H, qd)
		matmul(w, rb.k, p.xn, L.Wk[r*kvd*H:(r+1)*kvd*H], T, H, kvd)
		matmul(w, rb.v, p.xn, L.Wv[r*kvd*H:(r+1)*kvd*H], T, H, kvd)
		parFor(w, T, func(_, t int) {
			pos := p.rows[t].pos
			rope(rb.q[t*qd:(t+1)*qd], nh, D, m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half])
			rope(rb.k[t*kvd:(t+1)*kvd], nkv, D, m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half])
		})
	}
	if hooks.BeforeAttention != nil {
		if err := hooks.BeforeAttention(l); err != nil {
			return err
		}
	}
	for r := range p.ranks {
		p.writeKV(l, r)
	}
	if hooks.KVStored != nil {
		if err := hooks.KVStored(l); err != nil {
			return err
		}
	}
	for r := range p.ranks {
		parFor(w, T*nh, func(wk, item int) { p.attendHead(l, r, wk, item/nh, item%nh) })
	}
	if hooks.AfterAttention != nil {
		if err := hooks.AfterAttention(l); err != nil {
			return err
		}
	}
	// o_proj: group g is KV head g's query heads, columns [g*gd, (g+1)*gd).
	G, full := c.groups(), c.NumAttentionHeads*D
	gd := full / G
	for r := range p.ranks {
		for g := r * G / p.tp; g < (r+1)*G/p.tp; g++ {
			matmulStrided(w, p.part[g], p.ranks[r].att, qd, (g-r*G/p.tp)*gd, L.Wo, full, g*gd, T, gd, H)
		}
	}
	p.allReduce()
	return nil
}

// allReduce adds the reduction groups' partial sums, in group order, to x:
// x += ((part0 + part1) + part2) + ...
func (p *pass) allReduce() {
	first := p.part[0]
	for i := range p.x {
		s := first[i]
		for g := 1; g < len(p.part); g++ {
			s += p.part[g][i]
		}
		p.x[i] += s
	}
}

// writeKV stores this pass's K/V of rank r's heads of layer l in the cache.
func (p *pass) writeKV(l, r int) {
	D := p.m.Config.Dim()
	nkv := p.m.Config.NumKeyValueHeads / p.tp
	kvd := nkv * D
	rb := &p.ranks[r]
	for t, ri := range p.rows {
		s := &p.seqs[ri.seq]
		id := s.BlockTable[ri.pos/p.blockSize]
		slot := ri.pos % p.blockSize
		for i := 0; i < nkv; i++ {
			kb, vb := p.kv.Head(l, id, r*nkv+i)
			copy(kb[slot*D:(slot+1)*D], rb.k[t*kvd+i*D:t*kvd+(i+1)*D])
			copy(vb[slot*D:(slot+1)*D], rb.v[t*kvd+i*D:t*kvd+(i+1)*D])
		}
	}
}

// attendHead computes rank r's local query head h of row t in layer l
// (worker wk's scratch): softmax of the scaled scores over positions
// 0..pos, then the weighted sum of the values, keys and values read in
// ascending position order.
func (p *pass) attendHead(l, r, wk, t, h int) {
	c := &p.m.Config
	D := c.Dim()
	nh := c.NumAttentionHeads / p.tp
	qd := nh * D
	scale := float32(1 / math.Sqrt(float64(D)))
	blockSize := p.blockSize
	ri := p.rows[t]
	table := p.seqs[ri.seq].BlockTable
	kh := (r*nh + h) / (c.NumAttentionHeads / c.NumKeyValueHeads) // global KV head
	if len(p.scratch[wk]) < p.maxLen {
		p.scratch[wk] = make([]float32, p.maxLen)
	}
	sc := p.scratch[wk][:ri.pos+1]
	rb := &p.ranks[r]
	qv := rb.q[t*qd+h*D : t*qd+(h+1)*D]
	mx := float32(math.Inf(-1))
	// Keys in ascending position order, one block at a time.
	for j0 := 0; j0 <= ri.pos; j0 += blockSize {
		kb, _ := p.kv.Head(l, table[j0/blockSize], kh)
		for j := j0; j <= ri.pos && j < j0+blockSize; j++ {
			off := (j - j0) * D
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
	out := rb.att[t*qd+h*D : t*qd+(h+1)*D]
	for d := range out {
		out[d] = 0
	}
	for j0 := 0; j0 <= ri.pos; j0 += blockSize {
		_, vb := p.kv.Head(l, table[j0/blockSize], kh)
		for j := j0; j <= ri.pos && j < j0+blockSize; j++ {
			off := (j - j0) * D
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

// mlp is layer l's SwiGLU block: per rank, gate and up of its slice of the
// intermediate dimension and down_proj's partials of its reduction
// groups; the all-reduce is added to x.
func (p *pass) mlp(l int) {
	c, L, w := &p.m.Config, &p.m.Layers[l], p.m.Workers
	H, I, T := c.HiddenSize, c.IntermediateSize, len(p.rows)
	G := c.groups()
	rmsnorm(w, p.xn, p.x, L.MLPNorm, T, H, c.RMSNormEps)
	for r := range p.ranks {
		rb := &p.ranks[r]
		i0, i1 := c.interBound(r*G/p.tp), c.interBound((r+1)*G/p.tp)
		n := i1 - i0
		matmul(w, rb.g, p.xn, L.Wgate[i0*H:i1*H], T, H, n)
		matmul(w, rb.u, p.xn, L.Wup[i0*H:i1*H], T, H, n)
		for i := range rb.g {
			rb.g[i] = silu(rb.g[i]) * rb.u[i]
		}
		for g := r * G / p.tp; g < (r+1)*G/p.tp; g++ {
			b0, b1 := c.interBound(g), c.interBound(g+1)
			matmulStrided(w, p.part[g], rb.g, n, b0-i0, L.Wdown, I, b0, T, b1-b0, H)
		}
	}
	p.allReduce()
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
