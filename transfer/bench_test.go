package transfer

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkTransfer: one b.Run per transport, op and block size; batches of
// 16 requests. Compare with BenchmarkLimits, run in the same invocation.
func BenchmarkTransfer(b *testing.B) {
	for _, tr := range []string{TransportTCP, TransportShm, TransportInproc} {
		for _, op := range []Opcode{OpWrite, OpRead} {
			for _, bs := range []int{4 << 10, 64 << 10, 1 << 20} {
				b.Run(fmt.Sprintf("%s/%s/%dKiB", tr, opName(op), bs>>10), func(b *testing.B) {
					benchTransfer(b, tr, op, bs, 16)
				})
			}
		}
	}
}

func benchTransfer(b *testing.B, tr string, op Opcode, bs, batch int) {
	ctx := context.Background()
	hub := NewHub()
	tgt, err := Open(ctx, Config{Transport: tr, InprocHub: hub})
	if err != nil {
		b.Fatal(err)
	}
	defer tgt.Close()
	ini, err := Open(ctx, Config{Transport: tr, InprocHub: hub})
	if err != nil {
		b.Fatal(err)
	}
	defer ini.Close()
	remote, err := tgt.AllocateManaged(bs * batch)
	if err != nil {
		b.Fatal(err)
	}
	local := make([]byte, bs*batch)
	_ = ini.RegisterBytes(local, "")
	seg, err := ini.OpenSegment(ctx, tgt.Name())
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]Request, batch)
	for i := range reqs {
		reqs[i] = Request{Op: op, Local: AddrOf(local[i*bs:]), Segment: seg, Remote: uint64(AddrOf(remote[i*bs:])), Length: bs}
	}
	b.SetBytes(int64(bs * batch))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := ini.Transfer(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkSmallDuringLarge: 4 KiB sync writes while a 64 MiB stream runs on
// the same peer; reports p50/p99 latency of the small writes.
func BenchmarkSmallDuringLarge(b *testing.B) {
	ctx := context.Background()
	tgt, err := Open(ctx, Config{Transport: TransportTCP})
	if err != nil {
		b.Fatal(err)
	}
	defer tgt.Close()
	ini, err := Open(ctx, Config{Transport: TransportTCP})
	if err != nil {
		b.Fatal(err)
	}
	defer ini.Close()
	const large, small = 64 << 20, 4 << 10
	remote := make([]byte, large+small)
	local := make([]byte, large+small)
	_ = tgt.RegisterBytes(remote, "")
	_ = ini.RegisterBytes(local, "")
	seg, err := ini.OpenSegment(ctx, tgt.Name())
	if err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		req := []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: large}}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := ini.Transfer(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	req := []Request{{Op: OpWrite, Local: AddrOf(local[large:]), Segment: seg, Remote: uint64(AddrOf(remote[large:])), Length: small}}
	var lats []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if err := ini.Transfer(ctx, req); err != nil {
			b.Fatal(err)
		}
		lats = append(lats, time.Since(t0))
		time.Sleep(200 * time.Microsecond) // sample the stream, do not saturate it
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	slices.Sort(lats)
	b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50_us")
	b.ReportMetric(float64(lats[min(len(lats)*99/100, len(lats)-1)].Microseconds()), "p99_us")
}

// BenchmarkLimits measures this machine's limits for the same block sizes:
// one raw loopback TCP stream and single-thread memcpy.
func BenchmarkLimits(b *testing.B) {
	for _, bs := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("rawtcp/%dKiB", bs>>10), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				buf := make([]byte, bs)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
				}
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, bs)
			b.SetBytes(int64(bs))
			for b.Loop() {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			_ = c.Close()
			wg.Wait()
		})
		b.Run(fmt.Sprintf("memcpy/%dKiB", bs>>10), func(b *testing.B) {
			src, dst := make([]byte, bs*16), make([]byte, bs*16)
			b.SetBytes(int64(bs))
			i := 0
			for b.Loop() {
				off := (i % 16) * bs
				copy(dst[off:off+bs], src[off:off+bs])
				i++
			}
		})
	}
}
