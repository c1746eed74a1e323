package model

import (
	"fmt"
	"testing"
)

// BenchmarkForward measures prefill chunks and decode steps of the small
// model; b.SetBytes counts tokens, so MB/s reads as millions of tokens/s.
func BenchmarkForward(b *testing.B) {
	m, err := NewBuiltin("small", 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 16, 512} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			kv := newTestKV(b, m, 40)
			p := prompt(n, 1)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Forward([]Seq{{Tokens: p, Start: 0, BlockTable: seqTable(0, 40), Logits: true}}, kv, 16, Hooks{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
