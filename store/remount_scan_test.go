package store

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/kvcache-go/mooncake/internal/objheader"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
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
		first := max(64, piece/16)
		pieces := cutRanges(ranges, 3<<20, first, piece)
		if n := pieces[0][len(pieces[0])-1][1] - pieces[0][0][0]; n < first || n >= first+objheader.Align {
			t.Fatalf("piece %d: first piece of %d bytes, want %d", piece, n, first)
		}
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

// TestScanSourceStreams: a scan in progress gives its reports in offset
// order, then the tail's; the total it announces after its first piece is
// within a tenth of the truth for evenly filled memory and exact once
// everything is given; a chunk never passes its bounds; a scan closed
// before it was read ends.
func TestScanSourceStreams(t *testing.T) {
	const piece = 1 << 20
	mem := make([]byte, 8*piece) // 65,536 objects: four chunks
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for off := 0; off+128 <= len(mem); off += 128 {
		key := fmt.Sprintf("s%07d", off>>7)
		val := mem[off+int(objheader.Len(key)) : off+int(objheader.Len(key))+50]
		for i := range val {
			val[i] = byte(off>>8 + i)
		}
		objheader.Encode(mem[off:], objheader.Header{Key: key, Seq: uint64(off + 1), Size: uint64(len(val)), CRC: crc32.Checksum(val, castagnoli)})
	}
	ranges := [][2]int{{0, len(mem)}}
	want := objheader.ScanRanges(mem, ranges)
	tail := []*pb.HeldObject{{Key: "disk/a", Disk: true}, {Key: "disk/b", Disk: true}}
	src := startScan(mem, ranges, "seg", piece, 0, tail)
	first, more := remountChunk(src, true) // what the scan found by its first report
	if len(first) == 0 || !more {
		t.Fatalf("first chunk: %d reports, more %v", len(first), more)
	}
	all := len(want) + len(tail)
	if est := len(first) + int(src.expect()); est < all-all/10 || est > all+all/10 {
		t.Fatalf("announced %d reports, the scan holds %d", est, all)
	}
	got := first
	for more {
		var c []*pb.HeldObject
		c, more = remountChunk(src, false)
		if len(c) == 0 || len(c) > remountChunkObjects {
			t.Fatalf("chunk of %d reports", len(c))
		}
		got = append(got, c...)
	}
	if src.expect() != 0 || src.peek() != nil {
		t.Fatalf("after the last chunk: %d expected, next %v", src.expect(), src.peek())
	}
	if src.close() <= 0 {
		t.Fatal("no scan time")
	}
	if len(got) != all {
		t.Fatalf("%d reports, want %d", len(got), all)
	}
	for i, w := range want {
		if g := got[i]; g.Offset != w.Offset || g.Key != w.Key || g.Seq != w.Seq || g.Segment != "seg" {
			t.Fatalf("report %d: %+v, want %+v", i, g, w)
		}
	}
	if got[len(want)] != tail[0] || got[len(want)+1] != tail[1] {
		t.Fatal("the tail's reports are not last, in order")
	}
	startScan(mem, ranges, "seg", piece, 0, nil).close() // closed unread: its goroutines end
}

// partSource is a heldSource of which only the first known reports are
// found so far: peek past them is an error of the test (it would wait).
type partSource struct {
	t     *testing.T
	held  []*pb.HeldObject
	known int
}

func (s *partSource) peek() *pb.HeldObject {
	if s.known == 0 && len(s.held) > 0 {
		s.t.Fatal("peek waits for a report not found yet")
	}
	if len(s.held) == 0 {
		return nil
	}
	return s.held[0]
}

func (s *partSource) peekReady() (*pb.HeldObject, bool) {
	if s.known == 0 && len(s.held) > 0 {
		return nil, false
	}
	return s.peek(), true
}

func (s *partSource) advance()       { s.held, s.known = s.held[1:], s.known-1 }
func (s *partSource) expect() uint64 { return uint64(len(s.held)) }

// A remount's first chunk takes what its source found already and does
// not wait for more: it says more may follow when the source cannot tell.
func TestRemountChunkReady(t *testing.T) {
	held := make([]*pb.HeldObject, 100)
	for i := range held {
		held[i] = &pb.HeldObject{Segment: "s", Key: fmt.Sprint("k", i), Offset: uint64(i) * 128}
	}
	src := &partSource{t: t, held: held, known: 30}
	c, more := remountChunk(src, true)
	if len(c) != 30 || !more || c[29] != held[29] {
		t.Fatalf("first chunk: %d reports, more %v", len(c), more)
	}
	src.known = 70 // the rest found
	c, more = remountChunk(src, true)
	if len(c) != 70 || more {
		t.Fatalf("second chunk: %d reports, more %v", len(c), more)
	}
}

// TestScanSourceBounded: a scan bounded to one piece per goroutine ahead
// of the reports given never has a piece done past that bound, gives
// every report exactly once, in order, then the tail's; a bounded scan
// closed while its goroutines wait for their turn ends.
func TestScanSourceBounded(t *testing.T) {
	const piece = 64 << 10
	mem := make([]byte, 64*piece) // 32,768 objects in 64 pieces
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for off := 0; off+128 <= len(mem); off += 128 {
		key := fmt.Sprintf("b%07d", off>>7)
		val := mem[off+int(objheader.Len(key)) : off+int(objheader.Len(key))+40]
		for i := range val {
			val[i] = byte(off>>9 + i)
		}
		objheader.Encode(mem[off:], objheader.Header{Key: key, Seq: uint64(off + 1), Size: uint64(len(val)), CRC: crc32.Checksum(val, castagnoli)})
	}
	ranges := [][2]int{{0, len(mem)}}
	want := objheader.ScanRanges(mem, ranges)
	tail := []*pb.HeldObject{{Key: "disk/a", Disk: true}}
	src := startScan(mem, ranges, "seg", piece, 1, tail)
	if src.ahead < 1 || len(src.found) < 2*src.ahead+2 {
		t.Fatalf("%d pieces, %d ahead: the bound is not exercised", len(src.found), src.ahead)
	}
	// beyond reports a piece done past the bound (-1: none).
	beyond := func() int {
		for k := src.i + src.ahead; k < len(src.done); k++ {
			select {
			case <-src.done[k]:
				return k
			default:
			}
		}
		return -1
	}
	var got []*pb.HeldObject
	for more := true; more; {
		var c []*pb.HeldObject
		c, more = remountChunkSmall(src, 1000)
		if k := beyond(); k >= 0 {
			t.Fatalf("piece %d scanned while piece %d is given next (%d ahead)", k, src.i, src.ahead)
		}
		got = append(got, c...)
	}
	src.close()
	if len(got) != len(want)+len(tail) {
		t.Fatalf("%d reports, want %d", len(got), len(want)+len(tail))
	}
	for i, w := range want {
		if g := got[i]; g.Offset != w.Offset || g.Key != w.Key || g.Seq != w.Seq {
			t.Fatalf("report %d: %+v, want %+v", i, g, w)
		}
	}
	if got[len(want)] != tail[0] {
		t.Fatal("the tail's report is not last")
	}

	early := startScan(mem, ranges, "seg", piece, 1, nil)
	if early.peek() == nil {
		t.Fatal("no first report")
	}
	early.close() // its goroutines wait for pieces never given: they end
}

// remountChunkSmall takes up to n reports from src, as remountChunk does
// a chunk, and says whether more follow.
func remountChunkSmall(src heldSource, n int) (chunk []*pb.HeldObject, more bool) {
	for len(chunk) < n {
		h := src.peek()
		if h == nil {
			return chunk, false
		}
		chunk = append(chunk, h)
		src.advance()
	}
	return chunk, src.peek() != nil
}
