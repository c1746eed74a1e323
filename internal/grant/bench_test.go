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
	for i := range maxSet {
		g, _ := keys.Encode(Grant{Segment: "s", Addr: uint64(i) << 20, Length: 1 << 20, Mode: Read, Expires: time.Now().Add(time.Hour)})
		if err := s.Install(g); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		addr uint64
	}{{"newest", uint64(maxSet-1) << 20}, {"oldest", 0}} {
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

// BenchmarkInstallRecalled: a READ grant the verifier verified before
// arrives on a lane (recalled by its MAC, not verified again).
func BenchmarkInstallRecalled(b *testing.B) {
	keys := ring(b, 1, "0123456789abcdef0123")
	v := NewVerifier(keys, nil)
	g, err := keys.Encode(Grant{Segment: "s", Addr: 4096, Length: 4096, Mode: Read, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		b.Fatal(err)
	}
	if err := v.NewSet("s").Install(g); err != nil {
		b.Fatal(err)
	}
	s := v.NewSet("s")
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Install(g); err != nil {
			b.Fatal(err)
		}
	}
}
