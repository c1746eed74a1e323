package tracesim

import (
	"slices"
	"testing"
)

// TestGenerateAgent: the same seed gives the same trace; requests are in
// timestamp order with len(hash_ids) = ceil(input_length/512) and a
// partial last block; every step after a task's first extends a prompt
// seen before by its full blocks; tool prompts are shared across tasks.
func TestGenerateAgent(t *testing.T) {
	s := DefaultAgentShape()
	s.Tasks = 300
	a, b := GenerateAgent(s, 7), GenerateAgent(s, 7)
	if len(a) != len(b) || len(a) < s.Tasks {
		t.Fatalf("%d vs %d requests for %d tasks", len(a), len(b), s.Tasks)
	}
	for i := range a {
		if a[i].Timestamp != b[i].Timestamp || !slices.Equal(a[i].HashIDs, b[i].HashIDs) {
			t.Fatalf("request %d differs between two runs of one seed", i)
		}
	}
	if c := GenerateAgent(s, 8); slices.Equal(c[0].HashIDs, a[0].HashIDs) && c[0].Timestamp == a[0].Timestamp && len(c) == len(a) {
		t.Fatal("another seed gave the same trace")
	}
	ideal, blocks := IdealHits(a)
	if ideal == 0 || ideal == blocks {
		t.Fatalf("degenerate: %d of %d blocks hit", ideal, blocks)
	}
	firsts := map[int64]int{}
	for i, r := range a {
		if i > 0 && r.Timestamp < a[i-1].Timestamp {
			t.Fatalf("request %d out of order", i)
		}
		if int64(len(r.HashIDs)) != ceilDiv(r.InputLength, BlockTokens) || r.InputLength%BlockTokens == 0 {
			t.Fatalf("request %d: %d blocks for %d tokens", i, len(r.HashIDs), r.InputLength)
		}
		firsts[r.HashIDs[0]]++
	}
	shared := 0
	for _, n := range firsts {
		if n > 1 {
			shared++
		}
	}
	if shared == 0 || len(firsts) > s.Tools {
		t.Fatalf("%d first blocks, %d shared, for %d tools", len(firsts), shared, s.Tools)
	}
}
