package main

import (
	"fmt"
	"testing"

	"github.com/kvcache-go/mooncake/transfer"
)

// BenchmarkBindingTransfer is the binding layer's sync write (what
// batch_transfer_sync_write calls below cgo) over TCP between two engines.
func BenchmarkBindingTransfer(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			ini, tgt, ibuf, tbuf := enginePair(b, "tcp")
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := ini.transfer(tgt.e.Name(), int64(transfer.OpWrite), []uint64{addr(ibuf)}, []uint64{addr(tbuf)}, []uint64{uint64(size)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
