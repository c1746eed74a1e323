package model

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// dot is the only reduction kernel of the model: every matmul output element
// and every attention score is one call, with one fixed summation order (four
// interleaved partial sums combined as (s0+s1)+(s2+s3), then the tail). This
// is what makes results independent of batch composition and chunking.
func dot(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	s := (s0 + s1) + (s2 + s3)
	for ; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// parFor runs fn(worker, i) for i in [0,n) on up to workers goroutines,
// handing out indexes dynamically. Which goroutine runs an index never
// changes the result: each index writes disjoint outputs.
func parFor(workers, n int, fn func(worker, i int)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if workers > n {
		workers = n
	}
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(w, i)
			}
		}(w)
	}
	wg.Wait()
}

const (
	rowTile = 8
	colTile = 32
)

// matmul computes out[r][c] = dot(x[r], w[c]) for x [rows][in], w [cols][in].
func matmul(workers int, out, x, w []float32, rows, in, cols int) {
	matmulStrided(workers, out, x, in, 0, w, in, 0, rows, in, cols)
}

// matmulStrided computes out[r][c] = dot(x[r*xStride+xOff:][:n],
// w[c*wStride+wOff:][:n]) for rows x cols outputs: a matmul over a slice of
// the inner dimension (one reduction group of a row-parallel projection),
// with the same kernel and tiling as matmul.
func matmulStrided(workers int, out, x []float32, xStride, xOff int, w []float32, wStride, wOff, rows, n, cols int) {
	rt := (rows + rowTile - 1) / rowTile
	ct := (cols + colTile - 1) / colTile
	parFor(workers, rt*ct, func(_, t int) {
		r0, c0 := (t/ct)*rowTile, (t%ct)*colTile
		r1, c1 := min(r0+rowTile, rows), min(c0+colTile, cols)
		for c := c0; c < c1; c++ {
			wc := w[c*wStride+wOff : c*wStride+wOff+n]
			for r := r0; r < r1; r++ {
				out[r*cols+c] = dot(x[r*xStride+xOff:r*xStride+xOff+n], wc)
			}
		}
	})
}

// rmsnorm writes w * x / sqrt(mean(x^2)+eps) for every row.
func rmsnorm(workers int, out, x, w []float32, rows, n int, eps float64) {
	parFor(workers, rows, func(_, r int) {
		xr := x[r*n : (r+1)*n]
		or := out[r*n : (r+1)*n]
		ss := dot(xr, xr)
		inv := float32(1 / math.Sqrt(float64(ss)/float64(n)+eps))
		for i, v := range xr {
			or[i] = (v * inv) * w[i]
		}
	})
}

// rope rotates each head of v (heads*dim floats) in place by position pos,
// pairing element i with i+dim/2 (the Hugging Face Llama convention).
func rope(v []float32, heads, dim int, cos, sin []float32) {
	half := dim / 2
	for h := 0; h < heads; h++ {
		x := v[h*dim : (h+1)*dim]
		for i := 0; i < half; i++ {
			x1, x2 := x[i], x[i+half]
			c, s := cos[i], sin[i]
			x[i] = x1*c - x2*s
			x[i+half] = x2*c + x1*s
		}
	}
}

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

// KernelFLOPS measures the float32 multiply-add rate of the model's matmul
// kernel on workers goroutines for about d: the compute limit the forward
// pass is judged against (2 FLOPs per multiply-add).
func KernelFLOPS(workers int, d time.Duration) float64 {
	const rows, in, cols = 64, 256, 640
	x := make([]float32, rows*in)
	w := make([]float32, cols*in)
	out := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i%7) * 0.1
	}
	for i := range w {
		w[i] = float32(i%5) * 0.1
	}
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		matmul(workers, out, x, w, rows, in, cols)
		n++
	}
	return float64(n) * 2 * rows * in * cols / time.Since(start).Seconds()
}

// FLOPsPerToken estimates the forward FLOPs of one token at position pos
// (0-based): 2 per weight of the layers and the output head, plus attention
// scores and the weighted sum over pos+1 keys.
func (m *Model) FLOPsPerToken(pos int) float64 {
	c := m.Config
	h, d := c.HiddenSize, c.Dim()
	perLayer := h*c.NumAttentionHeads*d*2 + h*c.NumKeyValueHeads*d*2 + 3*h*c.IntermediateSize
	weights := c.NumHiddenLayers*perLayer + c.VocabSize*h
	attn := 4 * c.NumHiddenLayers * c.NumAttentionHeads * d * (pos + 1)
	return float64(2*weights + attn)
}
