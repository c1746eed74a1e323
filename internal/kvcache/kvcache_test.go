package kvcache

import (
	"bufio"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func parseTokens(t *testing.T, s string) []int {
	if a, b, ok := strings.Cut(s, ".."); ok {
		lo, _ := strconv.Atoi(a)
		hi, _ := strconv.Atoi(b)
		var out []int
		for i := lo; i <= hi; i++ {
			out = append(out, i)
		}
		return out
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad token %q", f)
		}
		out = append(out, v)
	}
	return out
}

// TestSpecVectors checks every test vector written in docs/kv-block-identity.md.
func TestSpecVectors(t *testing.T) {
	f, err := os.Open("../../docs/kv-block-identity.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "root ") && !strings.HasPrefix(line, "vector ") {
			continue
		}
		lhs, rhs, _ := strings.Cut(line, "->")
		want := strings.Fields(rhs)
		kind, rest, _ := strings.Cut(strings.TrimSpace(lhs), " ")
		q := strings.Index(rest[1:], `"`) + 1
		salt, err := strconv.Unquote(rest[:q+1])
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		var got []string
		if kind == "root" {
			got = []string{RootHash(salt).String()}
		} else {
			fs := strings.Fields(rest[q+1:])
			bs, _ := strconv.Atoi(fs[0])
			for _, h := range HashBlocks(salt, bs, parseTokens(t, fs[1])) {
				got = append(got, h.String())
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s\n got %v", line, got)
		}
		n++
	}
	if n < 6 {
		t.Fatalf("found only %d vectors in the spec", n)
	}
}

func TestAppendBlockHashesIncremental(t *testing.T) {
	toks := make([]int, 50)
	for i := range toks {
		toks[i] = i * 3
	}
	all := HashBlocks("s", 8, toks)
	part := HashBlocks("s", 8, toks[:20])
	if got := AppendBlockHashes(part, "s", 8, toks); !slices.Equal(got, all) || len(all) != 6 {
		t.Fatalf("incremental hashes differ")
	}
}

func TestPoolRefCountsAndLRU(t *testing.T) {
	p := NewPool(4)
	a, err := p.Allocate(2) // blocks 0,1
	if err != nil || !slices.Equal(a, []int{0, 1}) {
		t.Fatalf("allocate: %v %v", a, err)
	}
	h0, h1 := HashBlock(RootHash(""), []int{1}), HashBlock(RootHash(""), []int{2})
	p.SetHash(0, h0)
	p.SetHash(1, h1)
	p.Touch([]int{0}) // shared by a second request
	if p.RefCount(0) != 2 || p.NumUsed() != 2 || p.NumFree() != 2 {
		t.Fatalf("refcounts: %d used %d free %d", p.RefCount(0), p.NumUsed(), p.NumFree())
	}
	p.Free(a)
	if p.NumFree() != 3 || p.RefCount(0) != 1 {
		t.Fatalf("after free: free %d ref %d", p.NumFree(), p.RefCount(0))
	}
	// Cached free block 1 is found and can be taken back.
	if got := p.Lookup([]BlockHash{h0, h1}); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("lookup %v", got)
	}
	p.Free([]int{0})
	// Free queue: 2, 3, 1, 0 -> allocating three takes 2, 3 then 1 (dropping h1).
	b, _ := p.Allocate(3)
	if !slices.Equal(b, []int{2, 3, 1}) {
		t.Fatalf("LRU order: %v", b)
	}
	if got := p.Lookup([]BlockHash{h0, h1}); !slices.Equal(got, []int{0}) {
		t.Fatalf("h1 should be evicted: %v", got)
	}
	if _, err := p.Allocate(2); !errors.Is(err, ErrNoBlocks) {
		t.Fatalf("want ErrNoBlocks, got %v", err)
	}
	p.Touch([]int{0})
	if p.NumFree() != 0 || p.NumCached() != 1 {
		t.Fatalf("free %d cached %d", p.NumFree(), p.NumCached())
	}
	p.DropHash(0)
	if len(p.Lookup([]BlockHash{h0})) != 0 {
		t.Fatal("dropped hash still found")
	}
}

func TestLayoutAndRegions(t *testing.T) {
	l := Layout{NumLayers: 2, NumBlocks: 3, BlockSize: 4, NumKVHeads: 2, HeadDim: 8}
	if l.HalfBytes() != 4*2*8*4 || l.BlockBytes() != 2*l.HalfBytes() || l.VOffset() != l.HalfBytes() || l.LayerBytes() != 3*l.BlockBytes() {
		t.Fatalf("layout arithmetic wrong: %+v", l)
	}
	var got []int
	r, err := NewRegions(l, func(size int) ([]byte, error) { got = append(got, size); return HeapAllocator(size) })
	if err != nil || !slices.Equal(got, []int{l.LayerBytes(), l.LayerBytes()}) {
		t.Fatalf("regions: %v %v", got, err)
	}
	k, v := r.Block(1, 2)
	k[0], v[0] = 1.5, 2.5
	raw := r.BlockBytes(1, 2)
	if raw[l.KOffset()+3] != 0x3f || raw[l.VOffset()+3] != 0x40 { // 1.5 = 0x3fc00000, 2.5 = 0x40200000 (LE)
		t.Fatalf("K/V not at the documented offsets")
	}
	if _, err := NewRegions(l, func(size int) ([]byte, error) { return make([]byte, size-1), nil }); !errors.Is(err, ErrLayout) {
		t.Fatalf("short region accepted: %v", err)
	}
	c := Compat{Model: "tiny", DType: "float32", NumLayers: 2, NumKVHeads: 2, HeadDim: 8, BlockSize: 16}
	c2 := c
	c2.BlockSize = 8
	if c.Hash() == c2.Hash() || c.Hash() != (Compat{Model: "tiny", DType: "float32", NumLayers: 2, NumKVHeads: 2, HeadDim: 8, BlockSize: 16}).Hash() {
		t.Fatal("compat hash does not separate block sizes or is not stable")
	}
}
