package conductor

import (
	"testing"

	"github.com/kvcache-go/mooncake/internal/kvevents"
)

// vllmStored is the BlockStored a vLLM engine (sha256_cbor, PYTHONHASHSEED
// 0) publishes for blocks [from, to) of a request: its own hashes and
// extra keys, with the parent of block from.
func vllmStored(t *testing.T, r kvevents.VLLMRequest, tokens []int, bs, from, to int) kvevents.BlockStored {
	t.Helper()
	h, err := kvevents.NewVLLMHasher(kvevents.VLLMSHA256CBOR, "0")
	if err != nil {
		t.Fatal(err)
	}
	all, err := h.Request(r, tokens, bs)
	if err != nil {
		t.Fatal(err)
	}
	extra := kvevents.VLLMExtraKeys(r, bs, len(all))
	e := kvevents.BlockStored{TokenIDs: tokens[from*bs : to*bs], BlockSize: bs, Medium: "GPU", LoraName: r.LoraName,
		ExtraKeys: extra[from:to]}
	for _, b := range all[from:to] {
		e.BlockHashes = append(e.BlockHashes, kvevents.BytesHash(b))
	}
	if from > 0 {
		p := kvevents.BytesHash(all[from-1])
		e.ParentBlockHash = &p
	}
	return e
}

func gpuOf(t *testing.T, x *Index, q Query, inst string) int {
	t.Helper()
	r, err := x.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	return r[DefaultTenant][inst].GPU
}

// Blocks that differ only in vLLM's extra keys are different blocks: a
// multimodal input names the blocks it overlaps (and those after), a
// request's cache salt puts its chain in the salt's context (later events
// of the chain follow it there), and the LoRA name is the context's
// adapter, as in vLLM's own block hashes.
func TestVLLMExtraKeysSeparateBlocks(t *testing.T) {
	const bs = 4
	x := New(Config{})
	for _, inst := range []string{"a", "b"} {
		if _, err := x.Register(reg(inst, 0)); err != nil {
			t.Fatal(err)
		}
	}
	tokens := make([]int, 6*bs)
	for i := range tokens {
		tokens[i] = 100 + i
	}
	img1 := []kvevents.MMFeature{{Identifier: "img-1", Offset: 5, Length: 6}} // blocks 1 and 2
	img2 := []kvevents.MMFeature{{Identifier: "img-2", Offset: 5, Length: 6}}
	apply := func(inst string, e kvevents.BlockStored) {
		t.Helper()
		if err := x.Apply(key(inst, 0), kvevents.Batch{Events: []kvevents.Event{e}}); err != nil {
			t.Fatal(err)
		}
	}
	apply("a", vllmStored(t, kvevents.VLLMRequest{MM: img1}, tokens, bs, 0, 6))
	apply("b", vllmStored(t, kvevents.VLLMRequest{MM: img2}, tokens, bs, 0, 6))
	q := Query{Identity: Identity{Model: "m", BlockSize: bs}, Tokens: Tokens32(tokens)}
	if a, b := gpuOf(t, x, q, "a"), gpuOf(t, x, q, "b"); a != bs || b != bs {
		t.Fatalf("no image: a %d b %d tokens, want the block before the image (%d)", a, b, bs)
	}
	q.MM = img1
	if a, b := gpuOf(t, x, q, "a"), gpuOf(t, x, q, "b"); a != 6*bs || b != bs {
		t.Fatalf("img-1: a %d b %d tokens, want %d and %d", a, b, 6*bs, bs)
	}
	q.MM = img2
	if a, b := gpuOf(t, x, q, "a"), gpuOf(t, x, q, "b"); a != bs || b != 6*bs {
		t.Fatalf("img-2: a %d b %d tokens", a, b)
	}

	// A salted request, published in two events: the second names its
	// parent only.
	salted := kvevents.VLLMRequest{CacheSalt: "user-7"}
	apply("a", vllmStored(t, salted, tokens, bs, 0, 2))
	apply("a", vllmStored(t, salted, tokens, bs, 2, 6))
	q = Query{Identity: Identity{Model: "m", BlockSize: bs, Salt: "user-7"}, Tokens: Tokens32(tokens)}
	if a := gpuOf(t, x, q, "a"); a != 6*bs {
		t.Fatalf("salt user-7: a %d tokens, want %d", a, 6*bs)
	}
	q.Salt = "user-8"
	if a := gpuOf(t, x, q, "a"); a != 0 {
		t.Fatalf("salt user-8: a %d tokens, want 0", a)
	}
	q.Salt = ""
	if a := gpuOf(t, x, q, "a"); a != bs {
		t.Fatalf("unsalted: a %d tokens, want the unsalted image chain's first block", a)
	}

	// A LoRA request: the adapter, every block's first extra key, is the
	// context's; it matches a query naming the adapter, with a salt too.
	lora := kvevents.VLLMRequest{LoraName: "sql", CacheSalt: "user-7", MM: img1}
	apply("b", vllmStored(t, lora, tokens, bs, 0, 3))
	apply("b", vllmStored(t, lora, tokens, bs, 3, 6))
	q = Query{Identity: Identity{Model: "m", BlockSize: bs, Lora: "sql", Salt: "user-7"}, Tokens: Tokens32(tokens), MM: img1}
	if b := gpuOf(t, x, q, "b"); b != 6*bs {
		t.Fatalf("lora sql, salt, img-1: b %d tokens, want %d", b, 6*bs)
	}
	q.Lora = ""
	if b := gpuOf(t, x, q, "b"); b != 0 {
		t.Fatalf("base model: b %d tokens, want 0", b)
	}
	st := x.Stats()[key("b", 0)]
	if st.Orphaned != 0 || st.BlocksStored != 12 {
		t.Fatalf("b's stats %+v", st)
	}
	// Removing the salted chain's blocks by the engine's hashes finds them
	// in the salt's context.
	e := vllmStored(t, salted, tokens, bs, 0, 6)
	if err := x.Apply(key("a", 0), kvevents.Batch{Events: []kvevents.Event{kvevents.BlockRemoved{BlockHashes: e.BlockHashes, Medium: "GPU"}}}); err != nil {
		t.Fatal(err)
	}
	q = Query{Identity: Identity{Model: "m", BlockSize: bs, Salt: "user-7"}, Tokens: Tokens32(tokens)}
	if a := gpuOf(t, x, q, "a"); a != 0 {
		t.Fatalf("after removal: a %d tokens", a)
	}
	if st := x.Stats()[key("a", 0)]; st.RemovedUnknown != 0 {
		t.Fatalf("a's stats %+v", st)
	}
}
