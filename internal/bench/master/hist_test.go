package master

import (
	"testing"
	"time"
)

// TestHistBuckets checks that every value falls in a bucket whose low edge
// is at most the value and within 1/32 of it, and that buckets are ordered.
func TestHistBuckets(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 31, 32, 33, 63, 64, 65, 1000, 4095, 4096, 123456789, 1 << 40} {
		b := bucketOf(v)
		if b < prev {
			t.Fatalf("bucketOf(%d) = %d < %d of a smaller value", v, b, prev)
		}
		prev = b
		lo := lowOf(b)
		if lo > v || float64(v-lo) > float64(v)/32 {
			t.Fatalf("value %d: bucket %d low edge %d", v, b, lo)
		}
	}
}

// TestHistQuantile checks p50 and p99 of 1..1000 us, merged from two halves.
func TestHistQuantile(t *testing.T) {
	var a, b Hist
	for i := 1; i <= 1000; i++ {
		h := &a
		if i%2 == 0 {
			h = &b
		}
		h.Add(time.Duration(i) * time.Microsecond)
	}
	a.Merge(b)
	if a.N != 1000 {
		t.Fatalf("N = %d, want 1000", a.N)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}} {
		got := a.Quantile(c.q)
		if got > c.want || float64(c.want-got) > float64(c.want)/16 {
			t.Fatalf("q%.2f = %v, want about %v", c.q, got, c.want)
		}
	}
	var empty Hist
	if empty.Quantile(0.99) != 0 {
		t.Fatal("empty histogram has a quantile")
	}
}
