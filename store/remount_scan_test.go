package store

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/kvcache-go/mooncake/internal/objheader"
)

// TestScanHeldPieces: the scan cut in pieces over several goroutines finds
// exactly what one scan of the same ranges finds, in the same order,
// whatever the ranges and however the pieces cut them.
func TestScanHeldPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const scanPiece = 64 << 10
	mem := make([]byte, 3*scanPiece+4096)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for off := 0; off+4096 < len(mem); off += objheader.Align * (2 + rng.IntN(10)) {
		key := fmt.Sprintf("k%07d", off)
		val := mem[off+int(objheader.Len(key)) : off+int(objheader.Len(key))+1+rng.IntN(100)]
		for i := range val {
			val[i] = byte(off + i)
		}
		objheader.Encode(mem[off:], objheader.Header{Key: key, Seq: uint64(off), Size: uint64(len(val)), CRC: crc32.Checksum(val, castagnoli), HardPin: off%3 == 0})
	}
	for round, ranges := range [][][2]int{
		{{0, len(mem)}},
		{{100, 50 << 10}, {(50 << 10) + 64, 2*scanPiece + 77}, {2*scanPiece + 4096, len(mem) + 999}},
		{{0, 64}, {scanPiece - 64, scanPiece + 64}, {2 * scanPiece, len(mem)}},
	} {
		want := objheader.ScanRanges(mem, ranges)
		got := scanHeld(mem, ranges, "seg", scanPiece)
		if len(want) < 100 || len(got) != len(want) {
			t.Fatalf("ranges %d: %d reports, one scan %d", round, len(got), len(want))
		}
		for i, w := range want {
			g := got[i]
			if g.Segment != "seg" || g.Offset != w.Offset || g.Key != w.Key || g.Size != w.Size || g.Crc32C != w.CRC || g.Seq != w.Seq || g.HardPin != w.HardPin {
				t.Fatalf("ranges %d, report %d: %+v, one scan %+v", round, i, g, w)
			}
		}
	}
	for _, piece := range []int{64, 100, 4096, 1 << 20} {
		ranges := [][2]int{{0, 1000}, {1000, 1 << 20}, {(1 << 20) + 64, 3 << 20}}
		pieces := cutRanges(ranges, 3<<20, piece)
		var flat [][2]int
		for _, p := range pieces {
			flat = append(flat, p...)
		}
		covered := 0
		for i, r := range flat {
			if r[0] >= r[1] || (i > 0 && r[0] < flat[i-1][1]) {
				t.Fatalf("piece %d: range %d %v after %v", piece, i, r, flat[i-1])
			}
			covered += r[1] - r[0]
		}
		if covered != 1000+(1<<20)-1000+(3<<20)-(1<<20)-64 {
			t.Fatalf("piece %d: %d bytes covered", piece, covered)
		}
	}
}
