package cli

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	benchserve "github.com/kvcache-go/mooncake/internal/bench/serve"
)

func TestBenchServeRuns(t *testing.T) {
	var out strings.Builder
	code, err := Run(context.Background(), []string{"bench", "serve", "--model", "tiny", "--prompt-len", "64", "--decode-tokens", "4", "--batches", "1,2", "--json"}, &out, io.Discard)
	if code != 0 {
		t.Fatalf("bench serve: %v", err)
	}
	var r benchserve.Result
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if r.KVBytesPerToken != 2*2*2*16*4 || r.TTFTColdSeconds <= 0 || len(r.Decode) != 2 || r.Decode[1].OutputTokensPerSec <= 0 {
		t.Fatalf("result %+v", r)
	}
}
