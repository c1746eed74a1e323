package tcp

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvcache-go/mooncake/internal/grant"
)

// A lane's index of the grants it sent answers exactly what a scan of
// its last grant.SetSize sends would: grants sent again at every
// distance, many of them ending in bytes that share a slot of the index
// (long probe runs, deletions in their middle), and grants that differ
// in their bytes but share the last 8.
func TestSentGrantIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pool := make([]string, 300)
	for i := range pool {
		b := make([]byte, 40)
		b[0] = byte(i)
		b[1] = byte(i >> 8)
		// Tails share a few home slots, and some the whole 8 bytes.
		tail := uint64(r.IntN(6)) | uint64(r.IntN(3))<<40
		binary.LittleEndian.PutUint64(b[32:], tail)
		pool[i] = string(b)
	}
	var l lane
	var last []string // the model: the last grant.SetSize sent
	for step := range 200_000 {
		// Mostly grants sent recently, sometimes any.
		g := pool[r.IntN(len(pool))]
		if len(last) > 0 && r.IntN(2) == 0 {
			g = last[max(0, len(last)-1-r.IntN(grant.SetSize+8))]
		}
		g = string([]byte(g)) // a copy: grants are told apart by their bytes
		want := slices.Contains(last, g)
		if got := l.sentGrant(g); got != want {
			t.Fatalf("step %d: sentGrant = %v, want %v", step, got, want)
		}
		if !want {
			last = append(last, g)
			if len(last) > grant.SetSize {
				last = last[1:]
			}
		}
		n := 0
		for _, e := range l.sentIdx {
			if e.pos != 0 {
				n++
			}
		}
		if n != len(last) {
			t.Fatalf("step %d: %d entries indexed, %d grants in the ring", step, n, len(last))
		}
	}
}
