package limits

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemcpy(t *testing.T) {
	for _, tc := range []struct{ span, block int }{{1 << 20, 4096}, {1 << 20, 1 << 20}, {1000, 4096}, {1 << 20, 0}} {
		if g := Memcpy(tc.span, tc.block, 10*time.Millisecond); g <= 0 {
			t.Errorf("Memcpy(%d, %d) = %v", tc.span, tc.block, g)
		}
	}
}

func TestRawTCP(t *testing.T) {
	ctx := context.Background()
	if g, err := RawTCP(ctx, "", 64<<10, 50*time.Millisecond); err != nil || g <= 0 {
		t.Fatalf("local sink: %v %v", g, err)
	}
	s, err := ListenSink(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 { // the sink serves one connection after another
		if g, err := RawTCP(ctx, s.Addr(), 4096, 20*time.Millisecond); err != nil || g <= 0 {
			t.Fatalf("sink %s: %v %v", s.Addr(), g, err)
		}
	}
}
