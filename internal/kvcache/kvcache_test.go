package kvcache

import (
	"bufio"
	"errors"
	"math/rand/v2"
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
	// Plain free 2, 3; cached queue 1, 0 -> allocating three takes 2, 3,
	// then evicts 1 (dropping h1), returned sorted.
	b, _ := p.Allocate(3)
	if !slices.Equal(b, []int{1, 2, 3}) {
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
	if l.HeadBytes() != 2*4*8*4 || l.BlockBytes() != 2*l.HeadBytes() || l.FullBlockBytes() != l.BlockBytes() || l.LayerBytes() != 3*l.BlockBytes() {
		t.Fatalf("layout arithmetic wrong: %+v", l)
	}
	var got []int
	r, err := NewRegions(l, func(size int) ([]byte, error) { got = append(got, size); return HeapAllocator(size) })
	if err != nil || !slices.Equal(got, []int{l.LayerBytes(), l.LayerBytes()}) {
		t.Fatalf("regions: %v %v", got, err)
	}
	k, v := r.Head(1, 2, 1)
	k[0], v[0] = 1.5, 2.5
	raw := r.BlockBytes(0, 1, 2)
	// Head 1 starts at HeadBytes(); its V half BlockSize*HeadDim floats later.
	if raw[l.HeadBytes()+3] != 0x3f || raw[l.HeadBytes()+4*8*4+3] != 0x40 { // 1.5 = 0x3fc00000, 2.5 = 0x40200000 (LE)
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

// TestPoolContiguity: a fresh pool hands out one run of ids; plain free
// blocks go out lowest first, before any cached block is evicted; evicted
// cached blocks go least recently freed first; every allocation is sorted.
func TestPoolContiguity(t *testing.T) {
	runs := func(ids []int) int {
		n := 0
		for i := range ids {
			if i == 0 || ids[i] != ids[i-1]+1 {
				n++
			}
		}
		return n
	}
	p := NewPool(256)
	a, _ := p.Allocate(100)
	if runs(a) != 1 || a[0] != 0 {
		t.Fatalf("fresh allocation %v", a)
	}
	b, _ := p.Allocate(50) // 100..149
	// Free a with hashes on its first half, b without: the plain set gets
	// 50..99 and 100..149 back; 0..49 are cached.
	for i := range 50 {
		p.SetHash(a[i], HashBlock(RootHash(""), []int{i}))
	}
	p.Free(a)
	p.Free(b)
	c, _ := p.Allocate(120)
	if runs(c) != 1 || c[0] != 50 || p.NumCached() != 50 {
		t.Fatalf("plain blocks should go first and contiguous: %d runs from %d, cached %d", runs(c), c[0], p.NumCached())
	}
	p.Free(c)
	// All 206 plain free blocks go before the 50 cached ones.
	d, _ := p.Allocate(206)
	if p.NumCached() != 50 || runs(d) != 1 || d[0] != 50 {
		t.Fatalf("cached evicted early: cached %d runs %d", p.NumCached(), runs(d))
	}
	// Then the cached ones, oldest first (freed in reverse: 49, 48, ...).
	e, _ := p.Allocate(10)
	if !slices.Equal(e, []int{40, 41, 42, 43, 44, 45, 46, 47, 48, 49}) || p.NumCached() != 40 {
		t.Fatalf("evicted %v, cached %d", e, p.NumCached())
	}
	// DropHash of a cached free block makes it plain: it goes out next.
	p.DropHash(0)
	if f, _ := p.Allocate(1); f[0] != 0 || p.NumCached() != 39 {
		t.Fatalf("dropped block not reused first: %v", f)
	}
	if p.NumFree()+p.NumUsed() != 256 {
		t.Fatalf("free %d + used %d", p.NumFree(), p.NumUsed())
	}
}

// TestPoolRandomOps: random allocate/free/hash/touch/drop sequences keep
// the pool consistent: no id handed out twice, allocations sorted, counts
// add up, cached hashes found.
func TestPoolRandomOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200
	p := NewPool(n)
	var held [][]int
	owned := make([]int, n) // references held by the test
	for step := range 5000 {
		switch rng.IntN(5) {
		case 0, 1:
			k := rng.IntN(20)
			ids, err := p.Allocate(k)
			if err != nil {
				if !errors.Is(err, ErrNoBlocks) || k <= p.NumFree() {
					t.Fatalf("step %d: %v", step, err)
				}
				continue
			}
			if !slices.IsSorted(ids) || len(ids) != k {
				t.Fatalf("step %d: allocation %v", step, ids)
			}
			for _, id := range ids {
				if owned[id] != 0 {
					t.Fatalf("step %d: block %d handed out while held", step, id)
				}
				owned[id]++
				if rng.IntN(2) == 0 {
					p.SetHash(id, HashBlock(RootHash(""), []int{step, id}))
				}
			}
			held = append(held, ids)
		case 2:
			if len(held) > 0 {
				i := rng.IntN(len(held))
				p.Free(held[i])
				for _, id := range held[i] {
					owned[id]--
				}
				held = slices.Delete(held, i, i+1)
			}
		case 3: // take a cached block back (prefix hit)
			id := rng.IntN(n)
			if h, ok := p.Hash(id); ok {
				if got := p.Lookup([]BlockHash{h}); !slices.Equal(got, []int{id}) {
					t.Fatalf("step %d: lookup %v, want %d", step, got, id)
				}
				p.Touch([]int{id})
				owned[id]++
				held = append(held, []int{id})
			}
		case 4:
			p.DropHash(rng.IntN(n))
		}
		used := 0
		for id, o := range owned {
			if o != p.RefCount(id) {
				t.Fatalf("step %d: block %d refcount %d, held %d", step, id, p.RefCount(id), o)
			}
			if o > 0 {
				used++
			}
		}
		if used != p.NumUsed() || p.NumFree()+p.NumUsed() != n {
			t.Fatalf("step %d: used %d, pool used %d free %d", step, used, p.NumUsed(), p.NumFree())
		}
	}
}

// TestPoolAllocateFor: a table grows in place when the next ids are free;
// a new table skips holes too small for it.
func TestPoolAllocateFor(t *testing.T) {
	p := NewPool(128)
	a, _ := p.Allocate(10) // 0..9
	b, _ := p.Allocate(1)  // 10
	c, _ := p.Allocate(5)  // 11..15
	p.Free(b)              // hole of 1 at 10
	// Growing a (last block 9) by 1 takes 10; growing c takes 16, 17.
	if g, _ := p.AllocateFor(1, a[len(a)-1], 1); !slices.Equal(g, []int{10}) {
		t.Fatalf("grow a: %v", g)
	}
	if g, _ := p.AllocateFor(2, c[len(c)-1], 2); !slices.Equal(g, []int{16, 17}) {
		t.Fatalf("grow c: %v", g)
	}
	p.Free([]int{3, 4, 5}) // hole of 3 at 3..5
	// A 2-block table of an 8-block prompt skips the 3-block hole.
	if g, _ := p.AllocateFor(2, -1, 8); !slices.Equal(g, []int{18, 19}) {
		t.Fatalf("room 8: %v", g)
	}
	// Without room it fills the hole (lowest run of 2).
	if g, _ := p.Allocate(2); !slices.Equal(g, []int{3, 4}) {
		t.Fatalf("first fit: %v", g)
	}
	// Growing past a used block falls back to the lowest run.
	if g, _ := p.AllocateFor(1, 17, 1); !slices.Equal(g, []int{5}) {
		t.Fatalf("blocked growth: %v", g)
	}
}

// TestRegionsTP: with TP 2 each rank holds half the heads in its own
// regions; the TP-independent form of a block is the same bytes as a TP 1
// engine's block holding the same values, and WriteBlock inverts ReadBlock.
func TestRegionsTP(t *testing.T) {
	l1 := Layout{NumLayers: 2, NumBlocks: 3, BlockSize: 4, NumKVHeads: 4, HeadDim: 2}
	l2 := l1
	l2.TP = 2
	r1, err := NewRegions(l1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	r2, err := NewRegions(l2, func(n int) ([]byte, error) { sizes = append(sizes, n); return HeapAllocator(n) })
	if err != nil || len(sizes) != 4 || sizes[0] != l1.LayerBytes()/2 || len(r2.Ranks) != 2 {
		t.Fatalf("tp 2 regions: %v %v", sizes, err)
	}
	for h := 0; h < 4; h++ {
		for _, r := range []*Regions{r1, r2} {
			k, v := r.Head(1, 2, h)
			for i := range k {
				k[i], v[i] = float32(h*100+i), -float32(h*100+i)
			}
		}
		if rank, _ := l2.HeadRank(h); rank != h/2 {
			t.Fatalf("head %d on rank %d", h, rank)
		}
	}
	// Rank 1 holds heads 2 and 3 only.
	if f := r2.floats[1][1][2*l2.BlockBytes()/4]; f != 200 {
		t.Fatalf("rank 1's first value of block 2 = %v, want head 2's 200", f)
	}
	full1, full2 := r1.ReadBlock(nil, 1, 2), r2.ReadBlock(nil, 1, 2)
	if !slices.Equal(full1, full2) || len(full1) != l1.FullBlockBytes() {
		t.Fatal("TP-independent forms differ")
	}
	if err := r2.WriteBlock(0, 0, full1); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r2.ReadBlock(nil, 0, 0), full1) {
		t.Fatal("WriteBlock does not invert ReadBlock")
	}
	if err := r2.WriteBlock(0, 0, full1[1:]); !errors.Is(err, ErrLayout) {
		t.Fatalf("short block accepted: %v", err)
	}
	bad := l1
	bad.TP = 3
	if _, err := NewRegions(bad, nil); !errors.Is(err, ErrTP) {
		t.Fatalf("tp 3 of 4 heads: %v", err)
	}
}
