package conductor

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// blockHasher computes the hashing standard's sequence hashes of a
// prompt's blocks for the query walk, where hashing is half of a long
// prompt's cost. It is XXH3-64 written out for the two input lengths the
// walk hashes (a block of 5 to 32 tokens: 17 to 128 bytes; a roll: 16
// bytes) with the seeded secret words computed once, instead of a call
// into github.com/zeebo/xxh3 per hash that switches on the length and
// re-adds the seed to every secret word. Hand-written for that reason
// only: Hasher (the library) stays the reference, and the tests check
// this against it for every block size it takes and random seeds. Other
// block sizes, big-endian hosts and blocks with content keys go through
// Hasher.
type blockHasher struct {
	// sec[i] is secret word i (bytes 8i..8i+8 of XXH3's default secret)
	// plus the seed for even i, minus it for odd i: the keys of the 17-128
	// byte path.
	sec [16]uint64
	// rollLo, rollHi are the keys of the 9-16 byte path.
	rollLo, rollHi uint64
}

// xxh3Secret are the first 128 bytes of XXH3's default secret (the
// specification's kSecret) as little-endian words.
var xxh3Secret = [16]uint64{
	0xbe4ba423396cfeb8, 0x1cad21f72c81017c, 0xdb979083e96dd4de, 0x1f67b3b7a4a44072,
	0x78e5c0cc4ee679cb, 0x2172ffcc7dd05a82, 0x8e2443f7744608b8, 0x4c263a81e69035e0,
	0xcb00c391bb52283c, 0xa32e531b8b65d088, 0x4ef90da297486471, 0xd8acdea946ef1938,
	0x3f349ce33f76faa8, 0x1d4f0bc7c7bbdcf9, 0x3159b4cd4be0518a, 0x647378d9c97e9fc8,
}

const (
	xxhPrime64_1 = 11400714785074694791
	xxh3AvalMul  = 0x165667919e3779f9
)

func newBlockHasher(seed uint64) blockHasher {
	var b blockHasher
	for i, w := range xxh3Secret {
		if i%2 == 0 {
			b.sec[i] = w + seed
		} else {
			b.sec[i] = w - seed
		}
	}
	b.rollLo = (xxh3Secret[3] ^ xxh3Secret[4]) + seed
	b.rollHi = (xxh3Secret[5] ^ xxh3Secret[6]) - seed
	return b
}

// fastBlockSize reports whether blockHasher hashes blocks of bs tokens
// (17 to 128 bytes, on a little-endian host).
func fastBlockSize(bs int) bool { return littleEndian && bs >= 5 && bs <= 32 }

func mulFold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func avalanche(h uint64) uint64 {
	h ^= h >> 37
	h *= xxh3AvalMul
	return h ^ h>>32
}

// roll is Hasher.Roll: XXH3 of le64(prev) || le64(local).
func (b *blockHasher) roll(prev, local uint64) uint64 {
	lo := prev ^ b.rollLo
	hi := local ^ b.rollHi
	return avalanche(16 + bits.ReverseBytes64(lo) + hi + mulFold(lo, hi))
}

// local16 is Hasher.Local of a block of 16 tokens (64 bytes) at p.
func (b *blockHasher) local16(p *[64]byte) uint64 {
	le := binary.LittleEndian
	acc := uint64(64 * xxhPrime64_1 & (1<<64 - 1)) // 64 * prime mod 2^64
	acc += mulFold(le.Uint64(p[0:])^b.sec[0], le.Uint64(p[8:])^b.sec[1])
	acc += mulFold(le.Uint64(p[48:])^b.sec[2], le.Uint64(p[56:])^b.sec[3])
	acc += mulFold(le.Uint64(p[16:])^b.sec[4], le.Uint64(p[24:])^b.sec[5])
	acc += mulFold(le.Uint64(p[32:])^b.sec[6], le.Uint64(p[40:])^b.sec[7])
	return avalanche(acc)
}

// local is Hasher.Local of 17 to 128 bytes.
func (b *blockHasher) local(p []byte) uint64 {
	l := len(p)
	r := func(off int) uint64 { return binary.LittleEndian.Uint64(p[off:]) }
	acc := uint64(l) * xxhPrime64_1
	if l > 32 {
		if l > 64 {
			if l > 96 {
				acc += mulFold(r(48)^b.sec[12], r(56)^b.sec[13])
				acc += mulFold(r(l-64)^b.sec[14], r(l-56)^b.sec[15])
			}
			acc += mulFold(r(32)^b.sec[8], r(40)^b.sec[9])
			acc += mulFold(r(l-48)^b.sec[10], r(l-40)^b.sec[11])
		}
		acc += mulFold(r(16)^b.sec[4], r(24)^b.sec[5])
		acc += mulFold(r(l-32)^b.sec[6], r(l-24)^b.sec[7])
	}
	acc += mulFold(r(0)^b.sec[0], r(8)^b.sec[1])
	acc += mulFold(r(l-16)^b.sec[2], r(l-8)^b.sec[3])
	return avalanche(acc)
}

// localTokens is Hasher.Local of a block of tokens (fastBlockSize).
func (b *blockHasher) localTokens(blk []uint32) uint64 {
	if len(blk) == 16 {
		return b.local16((*[64]byte)(unsafe.Pointer(&blk[0])))
	}
	return b.local(unsafe.Slice((*byte)(unsafe.Pointer(&blk[0])), 4*len(blk)))
}

// seqs sets dst to the sequence hashes of blocks i, i+1, ... of tokens in
// blocks of bs (fastBlockSize(bs)); prev is block i-1's.
func (b *blockHasher) seqs(tokens []uint32, bs, i int, dst []uint64, prev uint64) {
	if len(dst) == 0 {
		return
	}
	_ = tokens[(i+len(dst))*bs-1]
	if bs == 16 {
		// local16 written out, the keys in registers: the hashes of
		// successive blocks are independent but for the roll, and the
		// loop lets the CPU run blocks ahead of the roll's chain.
		le := binary.LittleEndian
		s0, s1, s2, s3, s4, s5, s6, s7 := b.sec[0], b.sec[1], b.sec[2], b.sec[3], b.sec[4], b.sec[5], b.sec[6], b.sec[7]
		rlo, rhi := b.rollLo, b.rollHi
		base := unsafe.Pointer(unsafe.SliceData(tokens))
		for j := range dst {
			p := (*[64]byte)(unsafe.Add(base, (i+j)*64))
			acc := uint64(64 * xxhPrime64_1 & (1<<64 - 1))
			acc += mulFold(le.Uint64(p[0:])^s0, le.Uint64(p[8:])^s1)
			acc += mulFold(le.Uint64(p[48:])^s2, le.Uint64(p[56:])^s3)
			acc += mulFold(le.Uint64(p[16:])^s4, le.Uint64(p[24:])^s5)
			acc += mulFold(le.Uint64(p[32:])^s6, le.Uint64(p[40:])^s7)
			l := avalanche(acc)
			if i+j > 0 {
				lo, hi := prev^rlo, l^rhi
				l = avalanche(16 + bits.ReverseBytes64(lo) + hi + mulFold(lo, hi))
			}
			prev = l
			dst[j] = l
		}
		return
	}
	for j := range dst {
		k := i + j
		blk := tokens[k*bs : (k+1)*bs]
		l := b.local(unsafe.Slice((*byte)(unsafe.Pointer(&blk[0])), 4*bs))
		if k > 0 {
			l = b.roll(prev, l)
		}
		prev = l
		dst[j] = l
	}
}
