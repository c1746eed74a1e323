package transfer

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkScatterGather writes 2 MiB in the shape of a KV transfer
// between different TP sizes (2 KiB pieces, strided in the source, adjacent
// in the target) three ways, interleaved within each iteration so that a
// shared machine's load weighs on all three alike: as one scatter-gather
// request (sg), as 1024 plain requests (plain-2KiB), and, for reference, as
// two plain 1 MiB requests of contiguous memory (plain-1MiB). It reports
// each shape's median GB/s and the ratios sg/plain-1MiB and
// sg/plain-2KiB, per transport.
func BenchmarkScatterGather(b *testing.B) {
	const total, piece = 2 << 20, 2 << 10
	for _, tr := range []string{TransportShm, TransportTCP} {
		b.Run(tr, func(b *testing.B) {
			ctx := context.Background()
			tgt, err := Open(ctx, Config{Transport: tr})
			if err != nil {
				b.Fatal(err)
			}
			defer tgt.Close()
			ini, err := Open(ctx, Config{Transport: tr})
			if err != nil {
				b.Fatal(err)
			}
			defer ini.Close()
			remote, err := tgt.AllocateManaged(total)
			if err != nil {
				b.Fatal(err)
			}
			local, err := ini.AllocateManaged(2 * total)
			if err != nil {
				b.Fatal(err)
			}
			seg, err := ini.OpenSegment(ctx, tgt.Name())
			if err != nil {
				b.Fatal(err)
			}
			var big, small []Request
			for i := 0; i < total; i += 1 << 20 {
				big = append(big, Request{Op: OpWrite, Local: AddrOf(local[i:]), Segment: seg, Remote: uint64(AddrOf(remote[i:])), Length: 1 << 20})
			}
			var ext []Extent
			for i := 0; i < total/piece; i++ {
				x := Extent{Local: AddrOf(local[2*i*piece:]), Remote: uint64(AddrOf(remote[i*piece:])), Length: piece}
				ext = append(ext, x)
				small = append(small, Request{Op: OpWrite, Local: x.Local, Segment: seg, Remote: x.Remote, Length: x.Length})
			}
			sg := []Request{{Op: OpWrite, Segment: seg, Extents: ext}}
			shapes := []struct {
				name string
				reqs []Request
				gbps []float64
			}{{name: "plain-1MiB", reqs: big}, {name: "plain-2KiB", reqs: small}, {name: "sg", reqs: sg}}
			b.SetBytes(3 * total)
			b.ReportAllocs()
			for b.Loop() {
				for i := range shapes {
					s := &shapes[i]
					t := time.Now()
					if err := ini.Transfer(ctx, s.reqs); err != nil {
						b.Fatal(err)
					}
					s.gbps = append(s.gbps, total/time.Since(t).Seconds()/1e9)
				}
			}
			med := make([]float64, len(shapes))
			for i := range shapes {
				slices.Sort(shapes[i].gbps)
				med[i] = shapes[i].gbps[len(shapes[i].gbps)/2]
				b.ReportMetric(med[i], fmt.Sprintf("GB/s-%s", shapes[i].name))
			}
			b.ReportMetric(med[2]/med[0], "sg/plain-1MiB")
			b.ReportMetric(med[2]/med[1], "sg/plain-2KiB")
		})
	}
}
