package storeconnector

import (
	"testing"

	"github.com/kvcache-go/mooncake/internal/kvcache"
	"github.com/kvcache-go/mooncake/internal/master"
)

// The master's TailFirst eviction recognises the connector's block keys as
// chains (master.ChainOf); this pins the two to one scheme.
func TestKeysAreMasterChains(t *testing.T) {
	compat := kvcache.Compat{Model: "m", DType: "float32", NumLayers: 2, NumKVHeads: 2, HeadDim: 8, BlockSize: 16}
	var h kvcache.BlockHash
	for i := range h {
		h[i] = byte(i * 7)
	}
	for _, prefix := range []string{"", "mooncake/kv/", "x"} {
		k := Key(prefix, compat, h)
		chain, ok := master.ChainOf(k)
		if !ok || chain != prefix+compat.Hash()+"/" {
			t.Fatalf("master.ChainOf(%q) = %q, %v", k, chain, ok)
		}
	}
}
