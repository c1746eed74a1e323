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
			n := 0
			tb.Range(func(k, v uint64) bool { n++; return ref[k] == v })
			if n != len(ref) {
				t.Fatalf("range saw %d of %d", n, len(ref))
			}
		}
	}
}

// slotsOf finds what Get finds, in a block table with crowded runs (keys
// past their home pair), key 0, and absent keys.
func TestSlotsOfAgainstGet(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	var tb table[masks]
	var keys []uint64
	for i := 0; i < 5000; i++ {
		k := rng.Uint64()
		if i%5 == 0 {
			k = uint64(i) * 0x100000001 // crowd some homes
		}
		p, _ := tb.Ptr(k)
		p[TierDevice] = k | 1
		keys = append(keys, k)
	}
	zp, _ := tb.Ptr(0)
	zp[TierHost] = 7
	for round := 0; round < 2; round++ {
		probe := append([]uint64{0}, keys...)
		for i := 0; i < 500; i++ {
			probe = append(probe, rng.Uint64()) // absent
		}
		for start := 0; start < len(probe); start += walkChunk {
			chunk := probe[start:min(start+walkChunk, len(probe))]
			var at [walkChunk]int32
			slotsOf(&tb, chunk, at[:len(chunk)])
			for i, k := range chunk {
				want, ok := tb.Get(k)
				var got masks
				switch a := at[i]; {
				case a >= 0:
					got = tb.slots[a].val
					if tb.slots[a].key != k {
						t.Fatalf("key %x: slot %d holds %x", k, a, tb.slots[a].key)
					}
				case a == atZero:
					got = tb.zero
				}
				if got != want || (at[i] != -1) != ok {
					t.Fatalf("key %x: slotsOf %d (%v), Get %v %v", k, at[i], got, want, ok)
				}
			}
		}
		tb.Delete(0) // and without key 0
		for _, k := range keys[:1000] {
			tb.Delete(k)
		}
	}
}
