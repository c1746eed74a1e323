package transfer

import (
	"bytes"
	"testing"
	"time"
)

// TestLinkRate: with Config.LinkRate a TCP write of n bytes takes at least
// (n - burst) / rate (the token bucket paces the lanes) and arrives
// intact; the same write without the limit is far faster.
func TestLinkRate(t *testing.T) {
	const rate = 8 << 20 // bytes/s
	const size = 2 << 20
	write := func(limit float64) time.Duration {
		ini, tgt, seg := pair(t, TransportTCP, func(c *Config) { c.LinkRate = limit })
		remote, local := make([]byte, size), make([]byte, size)
		if err := tgt.RegisterBytes(remote, "cpu:0"); err != nil {
			t.Fatal(err)
		}
		if err := ini.RegisterBytes(local, "cpu:0"); err != nil {
			t.Fatal(err)
		}
		fill(local, 7)
		start := time.Now()
		if err := ini.Transfer(ctxT(t), []Request{{Op: OpWrite, Local: AddrOf(local), Segment: seg, Remote: uint64(AddrOf(remote)), Length: size}}); err != nil {
			t.Fatalf("write: %v", err)
		}
		el := time.Since(start)
		if !bytes.Equal(remote, local) {
			t.Fatal("remote differs after a rate-limited write")
		}
		return el
	}
	limited := write(rate)
	min := time.Duration(float64(size-64<<10) / rate * float64(time.Second))
	if limited < min {
		t.Fatalf("%d bytes at %d bytes/s took %v, want >= %v", size, rate, limited, min)
	}
	free := write(0)
	t.Logf("limited %v (>= %v), unlimited %v", limited, min, free)
	if free >= limited {
		t.Fatalf("unlimited write %v not faster than the limited one %v", free, limited)
	}
}
