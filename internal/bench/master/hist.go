package master

import (
	"math/bits"
	"time"
)

// subBits is the number of mantissa bits below the leading one that a
// histogram bucket keeps: 2^subBits buckets per power of two, so a
// quantile is within about 3% of the true latency.
const subBits = 5

// Hist is a latency histogram with log-linear buckets. Its zero value is
// empty and ready; workers send theirs to the bench as JSON and Merge adds
// them, so a p99 over 256 clients in 8 processes is one quantile of all
// their calls.
type Hist struct {
	Counts []uint64 `json:"counts"` // by bucket (bucketOf)
	N      uint64   `json:"n"`
}

// bucketOf returns the bucket of v nanoseconds.
func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // shift that leaves subBits+1 bits
	return (e+1)<<subBits + int(v>>e) - 1<<subBits
}

// lowOf is the smallest value of bucket b.
func lowOf(b int) uint64 {
	if b < 1<<subBits {
		return uint64(b)
	}
	e := b>>subBits - 1
	return (uint64(b&(1<<subBits-1)) | 1<<subBits) << e
}

// Add records one latency.
func (h *Hist) Add(d time.Duration) {
	v := uint64(max(d, 0))
	b := bucketOf(v)
	if b >= len(h.Counts) {
		h.Counts = append(h.Counts, make([]uint64, b+1-len(h.Counts))...)
	}
	h.Counts[b]++
	h.N++
}

// Merge adds o's samples to h.
func (h *Hist) Merge(o Hist) {
	if len(o.Counts) > len(h.Counts) {
		h.Counts = append(h.Counts, make([]uint64, len(o.Counts)-len(h.Counts))...)
	}
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.N += o.N
}

// Quantile returns the q quantile (0 < q <= 1) as the low edge of its
// bucket; 0 when empty.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.N == 0 {
		return 0
	}
	rank := uint64(q*float64(h.N) + 0.5)
	rank = min(max(rank, 1), h.N)
	var seen uint64
	for b, c := range h.Counts {
		seen += c
		if seen >= rank {
			return time.Duration(lowOf(b))
		}
	}
	return time.Duration(lowOf(len(h.Counts) - 1))
}
