package store

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestChecksumMatchesCRC32C(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 4096, parallelMin - 1, parallelMin, parallelMin + 7, 3<<20 + 13, 16 << 20} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := Checksum(b), crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)); got != want {
			t.Fatalf("n=%d: Checksum=%08x, crc32c=%08x", n, got, want)
		}
	}
}

func TestCRC32Combine(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		a := make([]byte, r.IntN(3000))
		b := make([]byte, r.IntN(3000))
		for i := range a {
			a[i] = byte(r.Uint32())
		}
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		whole := crc32.Checksum(append(append([]byte{}, a...), b...), castagnoli)
		if got := crc32Combine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), int64(len(b))); got != whole {
			t.Fatalf("combine(%d,%d) = %08x, want %08x", len(a), len(b), got, whole)
		}
	}
}

func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{4 << 10, 1 << 20, 16 << 20} {
		buf := make([]byte, n)
		b.Run(byteSize(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				Checksum(buf)
			}
		})
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}
