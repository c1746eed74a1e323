package transfer

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkScatterGather: 2 MiB written as the KV shapes of a TP pair
// move it: 2 KiB pieces strided on one side, as 1024 plain requests and
// as one scatter-gather request, against two 1 MiB plain requests, per
// transport, in one invocation (compare the GB/s).
func BenchmarkScatterGather(b *testing.B) {
	const total, piece = 2 << 20, 2 << 10
	for _, tr := range []string{TransportTCP, TransportShm} {
		for _, shape := range []string{"plain-1MiB", "plain-2KiB", "sg-2KiB"} {
			b.Run(fmt.Sprintf("%s/%s", tr, shape), func(b *testing.B) {
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
				remote, err := tgt.AllocateManaged(2 * total)
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
				var reqs []Request
				switch shape {
				case "plain-1MiB":
					for i := 0; i < total; i += 1 << 20 {
						reqs = append(reqs, Request{Op: OpWrite, Local: AddrOf(local[i:]), Segment: seg, Remote: uint64(AddrOf(remote[i:])), Length: 1 << 20})
					}
				default:
					var ext []Extent
					for i := 0; i < total/piece; i++ {
						ext = append(ext, Extent{Local: AddrOf(local[2*i*piece:]), Remote: uint64(AddrOf(remote[i*piece:])), Length: piece})
					}
					if shape == "sg-2KiB" {
						reqs = []Request{{Op: OpWrite, Segment: seg, Extents: ext}}
					} else {
						for _, x := range ext {
							reqs = append(reqs, Request{Op: OpWrite, Local: x.Local, Segment: seg, Remote: x.Remote, Length: x.Length})
						}
					}
				}
				b.SetBytes(total)
				b.ReportAllocs()
				for b.Loop() {
					if err := ini.Transfer(ctx, reqs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
