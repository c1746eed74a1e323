package store

import (
	"hash/crc32"
	"runtime"
	"sync"
)

// castagnoliPoly is the reflected CRC32C polynomial.
const castagnoliPoly = 0x82f63b78

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// parallelMin is the size from which Checksum splits the work over cores.
const parallelMin = 512 << 10

// Checksum is the CRC32C the store records for a value. Large values are
// checksummed in parallel chunks whose CRCs are combined, so the result is
// the CRC32C of the whole value.
func Checksum(b []byte) uint32 {
	parts := min(runtime.GOMAXPROCS(0), len(b)/(parallelMin/2), 8)
	if len(b) < parallelMin || parts < 2 {
		return crc32.Checksum(b, castagnoli)
	}
	chunk := (len(b) + parts - 1) / parts
	crcs := make([]uint32, parts)
	var wg sync.WaitGroup
	for i := 1; i < parts; i++ {
		lo, hi := i*chunk, min((i+1)*chunk, len(b))
		wg.Add(1)
		go func() {
			defer wg.Done()
			crcs[i] = crc32.Checksum(b[lo:hi], castagnoli)
		}()
	}
	crcs[0] = crc32.Checksum(b[:chunk], castagnoli)
	wg.Wait()
	crc := crcs[0]
	for i := 1; i < parts; i++ {
		lo, hi := i*chunk, min((i+1)*chunk, len(b))
		crc = crc32Combine(crc, crcs[i], int64(hi-lo))
	}
	return crc
}

// crc32Combine returns the CRC32C of A||B from crc(A), crc(B) and len(B),
// by applying len(B) zero bytes to crc(A) with GF(2) matrix squaring.
func crc32Combine(crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1
	}
	var even, odd [32]uint32
	odd[0] = castagnoliPoly // the operator for one zero bit
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // two zero bits
	gf2Square(&odd, &even) // four zero bits
	for {
		gf2Square(&even, &odd) // doubles the zero bits each step
		if len2&1 != 0 {
			crc1 = gf2Times(&even, crc1)
		}
		len2 >>= 1
		if len2 == 0 {
			break
		}
		gf2Square(&odd, &even)
		if len2&1 != 0 {
			crc1 = gf2Times(&odd, crc1)
		}
		len2 >>= 1
		if len2 == 0 {
			break
		}
	}
	return crc1 ^ crc2
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := range 32 {
		square[n] = gf2Times(mat, mat[n])
	}
}
