package conductor

import (
	"math/rand"
	"testing"
)

// The table against a Go map on random inserts and deletes, with keys
// crowded into few homes so that runs wrap and backward shifts happen.
func TestTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	var tb table[uint64]
	ref := map[uint64]uint64{}
	for step := 0; step < 200000; step++ {
		k := uint64(rng.Intn(3000))
		if rng.Intn(4) == 0 {
			k *= 0x100000001 // collide on low bits, spread high
		}
		switch rng.Intn(3) {
		case 0, 1:
			p, ins := tb.Ptr(k)
			if _, had := ref[k]; had == ins {
				t.Fatalf("step %d: key %d inserted %v, map had %v", step, k, ins, had)
			}
			*p = uint64(step)
			ref[k] = uint64(step)
		case 2:
			tb.Delete(k)
			delete(ref, k)
		}
		if step%1000 == 0 {
			if tb.Len() != len(ref) {
				t.Fatalf("step %d: len %d, map %d", step, tb.Len(), len(ref))
			}
			for k, v := range ref {
				if got, ok := tb.Get(k); !ok || got != v {
					t.Fatalf("step %d: key %d = %d %v, map %d", step, k, got, ok, v)
				}
			}
			keys := make([]uint64, 3200)
			for i := range keys {
				keys[i] = uint64(i)
				if i%4 == 0 {
					keys[i] *= 0x100000001
				}
			}
			vals := make([]uint64, len(keys))
			tb.GetMany(keys, vals)
			for i, k := range keys {
				if vals[i] != ref[k] {
					t.Fatalf("step %d: GetMany key %d = %d, map %d", step, k, vals[i], ref[k])
				}
			}
			n := 0
			tb.Range(func(k, v uint64) bool { n++; return ref[k] == v })
			if n != len(ref) {
				t.Fatalf("range saw %d of %d", n, len(ref))
			}
		}
	}
}
