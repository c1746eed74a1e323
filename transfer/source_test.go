package transfer

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

// sliceSource serves a range from a byte slice and counts what is out.
type sliceSource struct {
	base uint64
	data []byte
	out  atomic.Int64
	fail atomic.Bool
}

func (s *sliceSource) ReadAt(addr, n uint64) ([]byte, func(), error) {
	if s.fail.Load() {
		return nil, nil, errors.New("disk gone")
	}
	b := append([]byte(nil), s.data[addr-s.base:addr-s.base+n]...)
	s.out.Add(1)
	return b, func() { s.out.Add(-1) }, nil
}

func TestSourceReads(t *testing.T) {
	const base = 1 << 62
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ini, tgt, seg := pair(t, tr, func(c *Config) { c.SliceSize = 64 << 10 })
			src := &sliceSource{base: base, data: make([]byte, 1<<20)}
			fill(src.data, 7)
			if err := tgt.RegisterSource(base, uint64(len(src.data)), "disk", src); err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, 600<<10)
			if err := ini.RegisterBytes(dst, "cpu:0"); err != nil {
				t.Fatal(err)
			}
			// Several slices (64 KiB) and a piece from the middle.
			err := ini.Transfer(ctxT(t), []Request{
				{Op: OpRead, Local: AddrOf(dst), Segment: seg, Remote: base + 4096, Length: 500 << 10},
				{Op: OpRead, Local: AddrOf(dst[500<<10:]), Segment: seg, Remote: base + 777, Length: 100 << 10},
			})
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if !bytes.Equal(dst[:500<<10], src.data[4096:4096+500<<10]) || !bytes.Equal(dst[500<<10:], src.data[777:777+100<<10]) {
				t.Fatal("bytes read differ from the source's")
			}
			// The lane releases each buffer once its bytes were sent.
			waitfor.Cond(t, 5*time.Second, "source buffers released", func() bool { return src.out.Load() == 0 })
			// Writes are refused, reads past the range too.
			for _, r := range []Request{
				{Op: OpWrite, Local: AddrOf(dst), Segment: seg, Remote: base, Length: 4096},
				{Op: OpRead, Local: AddrOf(dst), Segment: seg, Remote: base + 1<<20 - 100, Length: 4096},
			} {
				if err := ini.Transfer(ctxT(t), []Request{r}); err == nil {
					t.Fatalf("%v at %#x: want an error", r.Op, r.Remote)
				}
			}
			// A failing source answers the slice, and the lane keeps serving.
			src.fail.Store(true)
			if err := ini.Transfer(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(dst), Segment: seg, Remote: base, Length: 4096}}); err == nil {
				t.Fatal("read of a failing source: want an error")
			}
			src.fail.Store(false)
			if err := ini.Transfer(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(dst), Segment: seg, Remote: base, Length: 4096}}); err != nil {
				t.Fatalf("read after a failed one: %v", err)
			}
			if err := tgt.Unregister(uintptr(base)); err != nil {
				t.Fatal(err)
			}
			if err := ini.Transfer(ctxT(t), []Request{{Op: OpRead, Local: AddrOf(dst), Segment: seg, Remote: base, Length: 4096}}); err == nil {
				t.Fatal("read of an unregistered source: want an error")
			}
			if err := tgt.RegisterSource(0, 10, "disk", src); err == nil {
				t.Fatal("source at address 0: want an error")
			}
		})
	}
}

// prefetchSource is a sliceSource that is also a Prefetcher: it records
// the ranges hinted, and whether each read had been hinted first.
type prefetchSource struct {
	sliceSource
	mu       sync.Mutex
	hinted   map[Range]int
	unhinted int // reads of ranges not hinted before
	reads    int
}

func (s *prefetchSource) Prefetch(rs []Range) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		s.hinted[r]++
	}
}

func (s *prefetchSource) ReadAt(addr, n uint64) ([]byte, func(), error) {
	s.mu.Lock()
	s.reads++
	if s.hinted[Range{addr, n}] == 0 {
		s.unhinted++
	}
	s.mu.Unlock()
	return s.sliceSource.ReadAt(addr, n)
}

// TestSourcePrefetch: over TCP, every slice a lane reads from a
// Prefetcher was hinted to it first, exactly once, and only ranges of its
// own registered range are (a READ of the engine's memory in the same
// batch is not).
func TestSourcePrefetch(t *testing.T) {
	const base = 1 << 62
	ini, tgt, seg := pair(t, TransportTCP, func(c *Config) { c.SliceSize = 64 << 10 })
	src := &prefetchSource{sliceSource: sliceSource{base: base, data: make([]byte, 2<<20)}, hinted: map[Range]int{}}
	fill(src.data, 3)
	if err := tgt.RegisterSource(base, uint64(len(src.data)), "disk", src); err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 256<<10)
	fill(mem, 5)
	if err := tgt.RegisterBytes(mem, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 2<<20)
	if err := ini.RegisterBytes(dst, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	err := ini.Transfer(ctxT(t), []Request{
		{Op: OpRead, Local: AddrOf(dst), Segment: seg, Remote: base, Length: 1 << 20},
		{Op: OpRead, Local: AddrOf(dst[1<<20:]), Segment: seg, Remote: uint64(AddrOf(mem)), Length: len(mem)},
		{Op: OpRead, Local: AddrOf(dst[1<<20+len(mem):]), Segment: seg, Remote: base + 1<<20 + 4096, Length: 300 << 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst[:1<<20], src.data[:1<<20]) || !bytes.Equal(dst[1<<20:1<<20+len(mem)], mem) ||
		!bytes.Equal(dst[1<<20+len(mem):1<<20+len(mem)+300<<10], src.data[1<<20+4096:1<<20+4096+300<<10]) {
		t.Fatal("bytes read differ")
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.reads == 0 || src.unhinted != 0 {
		t.Fatalf("%d of %d source reads were not hinted first", src.unhinted, src.reads)
	}
	for r, n := range src.hinted {
		if n != 1 || r.Addr < base || r.Addr+r.Len > base+uint64(len(src.data)) {
			t.Fatalf("range %#x+%d hinted %d times (want once, inside the source)", r.Addr, r.Len, n)
		}
	}
}
