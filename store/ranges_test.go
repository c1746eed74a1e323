package store_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/store"
)

func TestGetRangesReadsOnlyTheRangesAsked(t *testing.T) {
	for _, transport := range []string{"", "tcp"} {
		t.Run("transport="+transport, func(t *testing.T) {
			c := newClusterTransport(t, master.Config{}, 2, 4<<20, transport)
			cl := c.client(nil)
			ctx := ctxT(t)
			want := value("table", 300<<10)
			if err := cl.PutWith(ctx, "table", want, store.PutOptions{Replicas: 2}); err != nil {
				t.Fatal(err)
			}
			reg := make([]byte, 64<<10)
			if err := cl.RegisterBuffer(reg); err != nil {
				t.Fatal(err)
			}
			defer cl.UnregisterBuffer(reg)
			for i := range reg {
				reg[i] = 0xee
			}
			offs := []uint64{0, 1000, 299 << 10, 5, uint64(len(want)) - 7}
			dsts := [][]byte{reg[0:16], reg[100:132], reg[200 : 200+1024], reg[5000:5000], reg[6000:6007]}
			if err := cl.GetRanges(ctx, "table", offs, dsts); err != nil {
				t.Fatal(err)
			}
			for i, d := range dsts {
				if !bytes.Equal(d, want[offs[i]:offs[i]+uint64(len(d))]) {
					t.Fatalf("range %d differs", i)
				}
			}
			if reg[16] != 0xee || reg[99] != 0xee || reg[132] != 0xee {
				t.Fatal("bytes outside the ranges were written")
			}
			err := cl.GetRanges(ctx, "table", []uint64{uint64(len(want)) - 3}, [][]byte{reg[:4]})
			if !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("range past the end: %v", err)
			}
			if err := cl.GetRanges(ctx, "table", []uint64{0, 1}, [][]byte{reg[:4]}); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("mismatched lists: %v", err)
			}
			if err := cl.GetRanges(ctx, "missing", []uint64{0}, [][]byte{reg[:4]}); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("missing key: %v", err)
			}
		})
	}
}
