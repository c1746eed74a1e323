package grant

import (
	"testing"
	"time"
)

// BenchmarkVerify is the cost of one grant arriving on a lane (decode,
// HMAC-SHA256, checks); BenchmarkAllow the cost each READ/WRITE slice pays
// against a lane's verified grants.
func BenchmarkVerify(b *testing.B) {
	keys := ring(b, 1, "0123456789abcdef0123")
	v := NewVerifier(keys, nil)
	g, _ := keys.Encode(Grant{Segment: "127.0.0.1:12345", Addr: 1 << 30, Length: 1 << 20, Mode: Read, Expires: time.Now().Add(time.Hour)})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(g, "127.0.0.1:12345"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllow(b *testing.B) {
	keys := ring(b, 1, "0123456789abcdef0123")
	v := NewVerifier(keys, nil)
	s := v.NewSet("s")
	for i := range SetSize {
		g, _ := keys.Encode(Grant{Segment: "s", Addr: uint64(i) << 20, Length: 1 << 20, Mode: Read, Expires: time.Now().Add(time.Hour)})
		if err := s.Install(g); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		addr uint64
	}{{"newest", uint64(SetSize-1) << 20}, {"oldest", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Allow(Read, bc.addr+4096, 4096); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncode is what the master pays per replica it grants.
func BenchmarkEncode(b *testing.B) {
	keys := ring(b, 1, "0123456789abcdef0123")
	exp := time.Now().Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := keys.Encode(Grant{Segment: "127.0.0.1:12345", Addr: 1 << 30, Length: 1 << 20, Mode: Read, Expires: exp}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLane is what a storage node's lane pays per 4 KiB request
// whose grant arrives with it, on a lane whose ring is full: fresh: a
// WRITE grant not among the lane's (a put's placement the master signed).
func BenchmarkLane(b *testing.B) {
	keys := ring(b, 1, "0123456789abcdef0123")
	const seg = "127.0.0.1:12345"
	exp := time.Now().Add(time.Hour)
	b.Run("fresh", func(b *testing.B) {
		v := NewVerifier(keys, nil)
		gs := make([][]byte, 16*SetSize) // none among the lane's grants when it comes again
		for i := range gs {
			gs[i], _ = keys.Encode(Grant{Segment: seg, Addr: uint64(i+1) << 20, Length: 4096 + 128, Mode: Write, Expires: exp})
		}
		s := v.NewSet(seg)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i = (i + 1) % len(gs)
			if err := s.Install(gs[i]); err != nil {
				b.Fatal(err)
			}
			if err := s.Allow(Write, uint64(i+1)<<20, 4096+128); err != nil {
				b.Fatal(err)
			}
		}
	})
}
