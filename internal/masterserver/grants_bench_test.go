package masterserver

import (
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
)

// BenchmarkGranterSign: what a replica list's READ grant costs the
// master (signed per call; the same bytes within a step).
func BenchmarkGranterSign(b *testing.B) {
	keys, err := grant.NewKeyring(map[uint32][]byte{1: []byte("0123456789abcdef0123")})
	if err != nil {
		b.Fatal(err)
	}
	g := newGranter(keys, nil, 30*time.Second)
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		now := time.Now()
		i++
		_ = g.sign("127.0.0.1:40123", i%16384<<12, 4096, grant.Read, now, now.Add(10*time.Second))
	}
}
