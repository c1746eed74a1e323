package serve

import (
	"context"
	"testing"

	"github.com/kvcache-go/mooncake/internal/model"
)

func TestPrompt(t *testing.T) {
	a, b := Prompt(16, 1), Prompt(16, 2)
	if len(a) != 16 || a[0] == b[0] {
		t.Fatalf("%v %v", a, b)
	}
	for _, id := range a {
		if id < 0 || id >= 256 {
			t.Fatalf("token %d outside the byte vocabulary", id)
		}
	}
}

func TestRun(t *testing.T) {
	m, err := model.NewBuiltin("tiny", 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), m, 64, 4, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.KVBytesPerToken != 2*2*2*16*4 || r.TTFTColdSeconds <= 0 || r.TTFTHitSeconds <= 0 || r.KernelGFLOPS <= 0 ||
		r.MemcpyGBps <= 0 || len(r.Decode) != 2 || r.Decode[1].Batch != 2 || r.Decode[1].OutputTokensPerSec <= 0 {
		t.Fatalf("result %+v", r)
	}
}
