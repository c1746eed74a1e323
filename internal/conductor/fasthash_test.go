package conductor

import (
	"math/rand"
	"testing"
)

// blockHasher against Hasher (the xxh3 library) for every block size it
// takes, random seeds (0 and the default among them) and random tokens,
// starting at every block of the prompt, from a sub-slice at a 4-byte
// offset too.
func TestBlockHasherMatchesHasher(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	seeds := []uint64{0, DefaultSeed, 1<<64 - 1}
	for i := 0; i < 5; i++ {
		seeds = append(seeds, rng.Uint64())
	}
	for _, seed := range seeds {
		h, fast := NewHasher(seed), newBlockHasher(seed)
		for bs := 1; bs <= 40; bs++ {
			if !fastBlockSize(bs) {
				if bs >= 5 && bs <= 32 {
					t.Fatalf("block size %d not fast", bs)
				}
				continue
			}
			raw := make([]uint32, 1+bs*12)
			for i := range raw {
				raw[i] = rng.Uint32()
				if i%3 == 0 {
					raw[i] = uint32(rng.Intn(150000))
				}
			}
			for _, tokens := range [][]uint32{raw[:bs*12], raw[1:]} {
				want := h.SeqHashes(tokens, bs)
				for start := 0; start < len(want); start++ {
					var prev uint64
					if start > 0 {
						prev = want[start-1]
					}
					got := make([]uint64, len(want)-start)
					fast.seqs(tokens, bs, start, got, prev)
					for j := range got {
						if got[j] != want[start+j] {
							t.Fatalf("seed %d bs %d start %d block %d: %x, xxh3 %x", seed, bs, start, start+j, got[j], want[start+j])
						}
					}
				}
			}
		}
		for i := 0; i < 1000; i++ {
			a, b := rng.Uint64(), rng.Uint64()
			if got, want := fast.roll(a, b), h.Roll(a, b); got != want {
				t.Fatalf("seed %d roll(%x, %x) = %x, xxh3 %x", seed, a, b, got, want)
			}
		}
	}
}
