package store

import (
	"hash/crc32"
	"runtime"
	"sync"
)

// castagnoliPoly is the reflected CRC32C polynomial.
const castagnoliPoly = 0x82f63b78

// castagnoli is the CRC32C table; hash/crc32 computes it with the SSE4.2
// crc32 instruction (~24 GB/s on one core here).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// parallelMin is the size from which Checksum splits the work over cores.
// One core checksums 1 MiB in ~45 us; handing half of it to another
// goroutine saves less than the wake-up costs on a busy 2-core machine, so
// only large values are split (measured with BenchmarkChecksum).
const parallelMin = 4 << 20

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

// zeroOps[k] is the GF(2) matrix that feeds 2^k zero bytes through the
// CRC32C register, built once, so a combine costs one matrix-vector
// product per set bit of the length (~0.1 us) instead of rebuilding the
// operators by repeated squaring on every call (~13 us).
var zeroOps = sync.OnceValue(func() *[64][32]uint32 {
	var ops [64][32]uint32
	var one, two, four [32]uint32
	one[0] = castagnoliPoly // the operator for one zero bit
	row := uint32(1)
	for n := 1; n < 32; n++ {
		one[n] = row
		row <<= 1
	}
	gf2Square(&two, &one)     // two zero bits
	gf2Square(&four, &two)    // four zero bits
	gf2Square(&ops[0], &four) // eight zero bits: one zero byte
	for k := 1; k < 64; k++ {
		gf2Square(&ops[k], &ops[k-1])
	}
	return &ops
})

// crc32Combine returns the CRC32C of A||B from crc(A), crc(B) and len(B),
// by applying len(B) zero bytes to crc(A).
func crc32Combine(crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1
	}
	ops := zeroOps()
	for k := 0; len2 != 0; k, len2 = k+1, len2>>1 {
		if len2&1 != 0 {
			crc1 = gf2Times(&ops[k], crc1)
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
