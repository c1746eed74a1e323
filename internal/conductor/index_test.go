package conductor

import (
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"reflect"
	"strconv"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvcache-go/mooncake/internal/kvevents"
)

// The hashing standard against Python's xxhash (testdata/gen_xxh3_vectors.py).
func TestHasherMatchesPythonXXHash(t *testing.T) {
	raw, err := os.ReadFile("testdata/xxh3_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Seed    uint64 `json:"seed"`
		Vectors []struct {
			Tokens    []uint32 `json:"tokens"`
			BlockSize int      `json:"block_size"`
			Seq       []string `json:"seq"`
		} `json:"vectors"`
		ABC string `json:"local_abc_seed0"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if f.Seed != DefaultSeed {
		t.Fatalf("vectors for seed %d", f.Seed)
	}
	if got := strconv.FormatUint(digest([]byte("abc")), 10); got != f.ABC {
		t.Fatalf("xxh3(abc) = %s, python %s", got, f.ABC)
	}
	h, fast := NewHasher(DefaultSeed), newBlockHasher(DefaultSeed)
	for _, v := range f.Vectors {
		got := h.SeqHashes(v.Tokens, v.BlockSize)
		if fastBlockSize(v.BlockSize) { // the written-out hashing too
			f := make([]uint64, len(got))
			fast.seqs(v.Tokens, v.BlockSize, 0, f, 0)
			for i := range f {
				if s := strconv.FormatUint(f[i], 10); s != v.Seq[i] {
					t.Fatalf("%v/%d block %d: blockHasher %s, python %s", v.Tokens, v.BlockSize, i, s, v.Seq[i])
				}
			}
		}
		if len(got) != len(v.Seq) {
			t.Fatalf("%v/%d: %d hashes, python %d", v.Tokens, v.BlockSize, len(got), len(v.Seq))
		}
		for i := range got {
			if s := strconv.FormatUint(got[i], 10); s != v.Seq[i] {
				t.Fatalf("%v/%d block %d: %s, python %s", v.Tokens, v.BlockSize, i, s, v.Seq[i])
			}
		}
	}
}

func reg(inst string, rank int) Registration {
	return Registration{Kind: KindVLLM, Instance: inst, DPRank: rank, Identity: Identity{Model: "m", BlockSize: 4}}
}

func key(inst string, rank int) StreamKey {
	return StreamKey{Instance: inst, Tenant: DefaultTenant, DPRank: rank}
}

func toks(n, base int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = base + i
	}
	return out
}

// storedEvents announces the blocks of tokens as an engine would: its own
// hashes (bytes, here the decimal of a counter), parent chained, in
// events of per blocks.
func storedVLLM(tokens []int, bs, per int, medium string, prefix string) []kvevents.Event {
	var out []kvevents.Event
	var parent *kvevents.Hash
	n := len(tokens) / bs
	for i := 0; i < n; i += per {
		j := min(n, i+per)
		var hs []kvevents.Hash
		for k := i; k < j; k++ {
			hs = append(hs, kvevents.BytesHash([]byte(prefix+strconv.Itoa(k))))
		}
		out = append(out, kvevents.BlockStored{BlockHashes: hs, ParentBlockHash: parent, TokenIDs: tokens[i*bs : j*bs], BlockSize: bs, Medium: medium})
		p := hs[len(hs)-1]
		parent = &p
	}
	return out
}

func mustApply(t *testing.T, x *Index, k StreamKey, evs ...kvevents.Event) {
	t.Helper()
	if err := x.Apply(k, kvevents.Batch{Events: evs}); err != nil {
		t.Fatal(err)
	}
}

func query(t *testing.T, x *Index, tokens []int, inst string) map[string]InstanceMatch {
	t.Helper()
	r, err := x.Query(Query{Identity: Identity{Model: "m", BlockSize: 4}, Instance: inst, Tokens: Tokens32(tokens)})
	if err != nil {
		t.Fatal(err)
	}
	return r[DefaultTenant]
}

func TestTieredMatchPerRank(t *testing.T) {
	x := New(Config{})
	for _, r := range []Registration{reg("a", 0), reg("a", 1), reg("b", 0)} {
		if _, err := x.Register(r); err != nil {
			t.Fatal(err)
		}
	}
	prompt := toks(40, 100) // 10 blocks of 4
	// a/0: device 0..3, host 0..6 (offloaded), disk nothing
	mustApply(t, x, key("a", 0), storedVLLM(prompt[:16], 4, 2, "GPU", "x")...)
	mustApply(t, x, key("a", 0), storedVLLM(prompt[:28], 4, 3, "CPU", "x")...)
	// a/1: device 0..1, disk 0..8
	mustApply(t, x, key("a", 1), storedVLLM(prompt[:8], 4, 1, "GPU", "y")...)
	mustApply(t, x, key("a", 1), storedVLLM(prompt[:36], 4, 9, "DISK", "y")...)
	// b/0: device 0..9 of another prompt sharing 2 blocks
	other := append(append([]int{}, prompt[:8]...), toks(32, 900)...)
	mustApply(t, x, key("b", 0), storedVLLM(other, 4, 4, "GPU", "z")...)

	got := query(t, x, prompt, "")
	want := map[string]InstanceMatch{
		"a": {LongestMatched: 36, TierMatch: TierMatch{GPU: 16, CPU: 28, DISK: 36},
			DP:    map[string]int{"0": 28, "1": 36},
			Ranks: map[string]TierMatch{"0": {16, 28, 28}, "1": {8, 8, 36}}},
		"b": {LongestMatched: 8, TierMatch: TierMatch{GPU: 8, CPU: 8, DISK: 8},
			DP: map[string]int{"0": 8}, Ranks: map[string]TierMatch{"0": {8, 8, 8}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// A host block after a device miss continues only from the first miss:
	// a device hole at block 1 of a/0 makes host count from block 1.
	mustApply(t, x, key("a", 0), kvevents.BlockRemoved{BlockHashes: []kvevents.Hash{kvevents.BytesHash([]byte("x1"))}, Medium: "GPU"})
	if m := query(t, x, prompt, "a")["a"].Ranks["0"]; m != (TierMatch{4, 28, 28}) {
		t.Fatalf("after a device hole: %+v", m)
	}
	// Removal of the host copy of block 1 ends the host run there.
	mustApply(t, x, key("a", 0), kvevents.BlockRemoved{BlockHashes: []kvevents.Hash{kvevents.BytesHash([]byte("x1"))}, Medium: "CPU"})
	if m := query(t, x, prompt, "a")["a"].Ranks["0"]; m != (TierMatch{4, 4, 4}) {
		t.Fatalf("after a host hole: %+v", m)
	}
	// query_by_hash agrees with query.
	r, err := x.QueryHashes(Query{Identity: Identity{Model: "m", BlockSize: 4}, SeqHashes: x.Hasher().SeqHashes(Tokens32(prompt), 4)})
	if err != nil || !reflect.DeepEqual(r[DefaultTenant], query(t, x, prompt, "")) {
		t.Fatalf("by hash %+v %v", r, err)
	}
	// AllBlocksCleared forgets a publisher.
	mustApply(t, x, key("a", 1), kvevents.AllBlocksCleared{})
	if m := query(t, x, prompt, "a")["a"].Ranks["1"]; m != (TierMatch{}) {
		t.Fatalf("after clear: %+v", m)
	}
}

func TestSharedPoolServesEveryInstance(t *testing.T) {
	x := New(Config{})
	x.Register(reg("a", 0))
	x.Register(reg("b", 0))
	pool := Registration{Kind: KindMooncake, Instance: "store", Identity: Identity{Model: "m", BlockSize: 4}}
	if _, err := x.Register(pool); err != nil {
		t.Fatal(err)
	}
	prompt := toks(24, 7)
	seqs := x.Hasher().SeqHashes(Tokens32(prompt), 4)
	// a holds blocks 0..1 on device; the pool holds 0..4 in memory (keys as
	// decimal sequence hashes) and block 5 on disk (0x key).
	mustApply(t, x, key("a", 0), storedVLLM(prompt[:8], 4, 2, "GPU", "a")...)
	var evs []kvevents.Event
	for i := 0; i < 5; i++ {
		evs = append(evs, kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.BytesHash([]byte(strconv.FormatUint(seqs[i], 10)))}, TokenIDs: []int{}, BlockSize: 4, Medium: "cpu"})
	}
	evs = append(evs, kvevents.Standard{EventType: kvevents.EventStored, ObjectKey: "0x" + strconv.FormatUint(seqs[5], 16), Medium: "disk"})
	mustApply(t, x, key("store", 0), evs...)
	got := query(t, x, prompt, "")
	if len(got) != 2 {
		t.Fatalf("the pool is not a target: %+v", got)
	}
	if m := got["a"].TierMatch; m != (TierMatch{8, 20, 24}) {
		t.Fatalf("a: %+v", m)
	}
	if m := got["b"].TierMatch; m != (TierMatch{0, 20, 24}) {
		t.Fatalf("b: %+v", m)
	}
	if st := x.Stats()[key("store", 0)]; st.BlocksStored != 6 || st.Unresolved != 0 {
		t.Fatalf("pool stats %+v", st)
	}
	// A key ending in the hex of an engine hash resolves through the
	// engine that announced it.
	x2 := New(Config{})
	x2.Register(reg("a", 0))
	x2.Register(pool)
	eng := []byte{0xde, 0xad, 0xbe, 0xef}
	eng32 := append(eng, make([]byte, 28)...)
	mustApply(t, x2, key("a", 0), kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.BytesHash(eng32)}, TokenIDs: prompt[:4], BlockSize: 4, Medium: "GPU"})
	mustApply(t, x2, key("store", 0),
		kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.BytesHash([]byte("kv/" + hexOf(eng32)))}, BlockSize: 4, Medium: "CPU"},
		kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.BytesHash([]byte("not-a-hash"))}, BlockSize: 4, Medium: "CPU"})
	if st := x2.Stats()[key("store", 0)]; st.BlocksStored != 1 || st.Unresolved != 1 {
		t.Fatalf("pool stats %+v", st)
	}
	mustApply(t, x2, key("a", 0), kvevents.BlockRemoved{BlockHashes: []kvevents.Hash{kvevents.BytesHash(eng32)}, Medium: "GPU"})
	if m := query(t, x2, prompt, "a")["a"].TierMatch; m != (TierMatch{0, 4, 4}) {
		t.Fatalf("pool copy after engine eviction: %+v", m)
	}
}

func hexOf(b []byte) string {
	const d = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, d[c>>4], d[c&15])
	}
	return string(out)
}

func TestStandardEventsAndIdentity(t *testing.T) {
	x := New(Config{})
	x.Register(reg("a", 0))
	r := reg("a", 0)
	r.Instance = "c"
	r.Lora = "sql"
	x.Register(r)
	prompt := toks(16, 3)
	seqs := x.Hasher().SeqHashes(Tokens32(prompt), 4)
	var hs []kvevents.Hash
	for _, s := range seqs {
		hs = append(hs, kvevents.IntHash(s))
	}
	zero := 0
	// Standard seq hashes without tokens, given as is; with a lora_name the
	// blocks go to that adapter's context.
	mustApply(t, x, key("a", 0), kvevents.Standard{EventType: kvevents.EventStored, SeqHashes: hs[:2], BaseBlockIdx: &zero, Medium: "gpu"})
	mustApply(t, x, key("c", 0), kvevents.Standard{EventType: kvevents.EventStored, SeqHashes: hs, LoraName: "sql", Medium: "gpu"})
	if m := query(t, x, prompt, ""); m["a"].GPU != 8 || m["c"].GPU != 0 {
		t.Fatalf("base model: %+v", m)
	}
	res, err := x.Query(Query{Identity: Identity{Model: "m", Lora: "sql", BlockSize: 4}, Tokens: Tokens32(prompt)})
	if err != nil || res[DefaultTenant]["c"].GPU != 16 || res[DefaultTenant]["a"].GPU != 0 {
		t.Fatalf("lora: %+v %v", res, err)
	}
	// Token ids in a standard event are recomputed (the engine's hashes
	// are then its own), parent resolved through them.
	p := kvevents.IntHash(11)
	mustApply(t, x, key("a", 0),
		kvevents.Standard{EventType: kvevents.EventStored, SeqHashes: []kvevents.Hash{kvevents.IntHash(11)}, TokenIDs: prompt[8:12], ParentHash: &hs[1]},
	)
	if st := x.Stats()[key("a", 0)]; st.Orphaned != 0 || st.BlocksStored != 3 {
		t.Fatalf("stats %+v", st)
	}
	mustApply(t, x, key("a", 0), kvevents.Standard{EventType: kvevents.EventStored, SeqHashes: []kvevents.Hash{kvevents.IntHash(12)}, TokenIDs: prompt[12:16], ParentHash: &p})
	if m := query(t, x, prompt, "a")["a"]; m.GPU != 16 {
		t.Fatalf("recomputed chain: %+v", m)
	}
	// removed by the published hash; cleared by medium.
	mustApply(t, x, key("a", 0), kvevents.Standard{EventType: kvevents.EventRemoved, SeqHashes: []kvevents.Hash{kvevents.IntHash(12)}, Medium: "gpu"})
	if m := query(t, x, prompt, "a")["a"]; m.GPU != 12 {
		t.Fatalf("after removed: %+v", m)
	}
	mustApply(t, x, key("a", 0), kvevents.Standard{EventType: kvevents.EventCleared, Medium: "gpu"})
	if m := query(t, x, prompt, "a")["a"]; m.GPU != 0 || x.Stats()[key("a", 0)].Live != 0 {
		t.Fatalf("after cleared: %+v", m)
	}
}

func TestCountersAndCapacity(t *testing.T) {
	x := New(Config{MaxBlocks: 3})
	x.Register(reg("a", 0))
	prompt := toks(20, 1)
	evs := storedVLLM(prompt, 4, 5, "GPU", "h")
	mustApply(t, x, key("a", 0), evs...)
	mustApply(t, x, key("a", 0), evs...) // again: duplicates (the two refused ones refused again)
	orphan := kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.IntHash(5)}, ParentBlockHash: &kvevents.Hash{Int: 77}, TokenIDs: toks(4, 0), BlockSize: 4}
	noTokens := kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.IntHash(6)}, BlockSize: 4}
	sliding := kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.IntHash(8)}, TokenIDs: toks(4, 0), BlockSize: 4, GroupIdx: new(int), KVCacheSpecKind: "sliding_window"}
	g := 0
	mustApply(t, x, key("a", 0), orphan, noTokens, sliding,
		kvevents.BlockRemoved{BlockHashes: []kvevents.Hash{kvevents.IntHash(99)}},
		kvevents.BlockRemoved{BlockHashes: []kvevents.Hash{kvevents.IntHash(8)}, GroupIdx: &g},
		kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.IntHash(9)}, TokenIDs: toks(4, 0), BlockSize: 4, Medium: "tape"})
	st := x.Stats()[key("a", 0)]
	want := StreamStats{Batches: 3, BlocksStored: 3, StoredDuplicate: 3, CapacityDropped: 4, Orphaned: 1, Unhashable: 1,
		SkippedGroups: 2, RemovedUnknown: 1, BadMedium: 1, Live: 3}
	if st != want {
		t.Fatalf("stats\n got %+v\nwant %+v", st, want)
	}
	if x.Blocks() != 3 {
		t.Fatalf("blocks %d", x.Blocks())
	}
	if err := x.Apply(key("zz", 0), kvevents.Batch{}); !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("unknown stream: %v", err)
	}
	if _, err := x.Unregister(key("a", 0)); err != nil || x.Blocks() != 0 || len(x.GlobalView().Contexts) != 0 {
		t.Fatalf("unregister: %v blocks %d view %+v", err, x.Blocks(), x.GlobalView())
	}
	if _, err := x.Unregister(key("a", 0)); !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("second unregister: %v", err)
	}
}

func TestQueryErrors(t *testing.T) {
	x := New(Config{})
	x.Register(reg("a", 0))
	for _, c := range []struct {
		q    Query
		want error
	}{
		{Query{Identity: Identity{Model: "m", BlockSize: 0}}, ErrInvalid},
		{Query{Identity: Identity{BlockSize: 4}}, ErrInvalid},
		{Query{Identity: Identity{Model: "m", BlockSize: 8}}, ErrBlockSize},
		{Query{Identity: Identity{Model: "m", BlockSize: 4}, Instance: "nope"}, ErrUnknownInstance},
		{Query{Identity: Identity{Model: "m", BlockSize: 4, Tenant: "other"}, Instance: "a"}, ErrUnknownInstance},
	} {
		if _, err := x.Query(c.q); !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c.q, err, c.want)
		}
	}
	r, err := x.Query(Query{Identity: Identity{Model: "unknown", BlockSize: 4}})
	if err != nil || len(r[DefaultTenant]) != 0 {
		t.Fatalf("unknown model: %+v %v", r, err)
	}
	for _, bad := range []Registration{{Kind: "x", Instance: "a", Identity: Identity{Model: "m", BlockSize: 1}},
		{Kind: KindVLLM, Identity: Identity{Model: "m", BlockSize: 1}}, {Kind: KindVLLM, Instance: "a", Identity: Identity{BlockSize: 1}},
		{Kind: KindVLLM, Instance: "a", Identity: Identity{Model: "m"}}, {Kind: KindVLLM, Instance: "a", DPRank: -1, Identity: Identity{Model: "m", BlockSize: 1}}} {
		if _, err := x.Register(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if created, err := x.Register(reg("a", 0)); created || err != nil {
		t.Fatalf("re-register: %v %v", created, err)
	}
}

// The index against a naive model on random events: every query answer
// must equal the model's.
// The walk against a model (per owner and tier, the set of sequence hashes
// held) over random stores, removals and clears, with block sizes that
// take the library's hashing (4, 40) and the written-out one (16, 20).
func TestRandomAgainstModel(t *testing.T) {
	for _, bs := range []int{4, 16, 20, 40} {
		t.Run(strconv.Itoa(bs), func(t *testing.T) { randomAgainstModel(t, bs) })
	}
}

func randomAgainstModel(t *testing.T, bs int) {
	rng := rand.New(rand.NewSource(int64(bs)))
	x := New(Config{})
	type owner struct {
		inst string
		rank int
	}
	owners := []owner{{"a", 0}, {"a", 1}, {"b", 0}, {"c", 0}}
	for _, o := range owners {
		r := reg(o.inst, o.rank)
		r.BlockSize = bs
		x.Register(r)
	}
	x.Register(Registration{Kind: KindMooncake, Instance: "pool", Identity: Identity{Model: "m", BlockSize: bs}})
	// prompts share prefixes: a few roots, branching.
	var prompts [][]int
	for i := 0; i < 12; i++ {
		nb := 2 + rng.Intn(8)
		if i%4 == 0 {
			nb = 20 + rng.Intn(150) // past the walk's first chunks
		}
		p := toks(bs*nb+rng.Intn(bs), 1000*(i%3))
		for j := bs * (1 + rng.Intn(3)); j < len(p); j++ {
			p[j] += i
		}
		prompts = append(prompts, p)
	}
	h := x.Hasher()
	model := map[owner]*[3]map[uint64]bool{}
	for _, o := range owners {
		model[o] = &[3]map[uint64]bool{{}, {}, {}}
	}
	pool := [3]map[uint64]bool{{}, {}, {}}
	media := []string{"GPU", "CPU", "DISK"}
	for step := 0; step < 3000; step++ {
		p := prompts[rng.Intn(len(prompts))]
		seqs := h.SeqHashes(Tokens32(p), bs)
		t0 := rng.Intn(3)
		nb := 1 + rng.Intn(len(seqs))
		if rng.Intn(5) == 0 { // the pool
			i := rng.Intn(len(seqs))
			k := kvevents.BytesHash([]byte(strconv.FormatUint(seqs[i], 10)))
			if rng.Intn(2) == 0 {
				mustApply(t, x, key("pool", 0), kvevents.BlockStored{BlockHashes: []kvevents.Hash{k}, BlockSize: bs, Medium: media[t0]})
				pool[t0][seqs[i]] = true
			} else {
				mustApply(t, x, key("pool", 0), kvevents.BlockRemoved{BlockHashes: []kvevents.Hash{k}, Medium: media[t0]})
				delete(pool[t0], seqs[i])
			}
			continue
		}
		o := owners[rng.Intn(len(owners))]
		var hs []kvevents.Hash
		for _, s := range seqs[:nb] {
			hs = append(hs, kvevents.IntHash(s^0x5555)) // the engine's own hashes
		}
		switch rng.Intn(10) {
		case 0:
			mustApply(t, x, key(o.inst, o.rank), kvevents.AllBlocksCleared{})
			model[o] = &[3]map[uint64]bool{{}, {}, {}}
		case 1, 2, 3:
			i := rng.Intn(nb)
			mustApply(t, x, key(o.inst, o.rank), kvevents.BlockRemoved{BlockHashes: hs[i : i+1], Medium: media[t0]})
			delete(model[o][t0], seqs[i])
		default:
			mustApply(t, x, key(o.inst, o.rank), kvevents.BlockStored{BlockHashes: hs, TokenIDs: p[:bs*nb], BlockSize: bs, Medium: media[t0]})
			for _, s := range seqs[:nb] {
				model[o][t0][s] = true
			}
		}
		if step%7 != 0 {
			continue
		}
		q := prompts[rng.Intn(len(prompts))]
		r, err := x.Query(Query{Identity: Identity{Model: "m", BlockSize: bs}, Tokens: Tokens32(q)})
		if err != nil {
			t.Fatal(err)
		}
		got := r[DefaultTenant]
		qs := h.SeqHashes(Tokens32(q), bs)
		for _, o := range owners {
			var tm TierMatch
			i := 0
			for ; i < len(qs) && model[o][0][qs[i]]; i++ {
			}
			tm.GPU = bs * i
			for ; i < len(qs) && (model[o][1][qs[i]] || pool[1][qs[i]]); i++ {
			}
			tm.CPU = bs * i
			for ; i < len(qs) && (model[o][2][qs[i]] || pool[2][qs[i]]); i++ {
			}
			tm.DISK = bs * i
			if g := got[o.inst].Ranks[strconv.Itoa(o.rank)]; g != tm {
				t.Fatalf("step %d %v: got %+v, model %+v", step, o, g, tm)
			}
		}
	}
}

// SGLang's events as its publisher packs them (msgspec array_like: the
// batch [ts, events] without a DP rank, BlockStored [tag, block_hashes,
// parent_block_hash, token_ids, block_size, lora_id]) and vLLM's newer map
// form with lora_name and a sliding-window group, decoded and applied.
func TestAppliesDecodedEngineShapes(t *testing.T) {
	x := New(Config{})
	x.Register(Registration{Kind: KindSGLang, Instance: "sgl", Identity: Identity{Model: "m", BlockSize: 4}})
	x.Register(reg("vllm", 0))
	prompt := toks(12, 500)
	sgl, _ := msgpack.Marshal([]any{1.5, []any{
		[]any{"BlockStored", []any{int64(-11), int64(22)}, nil, prompt[:8], 4, nil},
		[]any{"BlockStored", []any{int64(33)}, int64(22), prompt[8:12], 4, nil},
		[]any{"BlockRemoved", []any{int64(33)}},
	}})
	b, err := kvevents.Decode(sgl)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, x, key("sgl", 0), b.Events...)
	vl, _ := msgpack.Marshal(map[string]any{"ts": 2.0, "data_parallel_rank": 0, "events": []any{
		map[string]any{"type": "BlockStored", "block_hashes": []any{[]byte("h0"), []byte("h1"), []byte("h2")}, "parent_block_hash": nil,
			"token_ids": prompt, "block_size": 4, "lora_id": nil, "medium": "GPU", "lora_name": nil, "extra_keys": nil, "group_idx": 0,
			"kv_cache_spec_kind": "full_attention"},
		map[string]any{"type": "BlockStored", "block_hashes": []any{[]byte("w0")}, "parent_block_hash": nil,
			"token_ids": prompt[:4], "block_size": 4, "medium": "GPU", "group_idx": 1, "kv_cache_spec_kind": "sliding_window"},
		map[string]any{"type": "BlockRemoved", "block_hashes": []any{[]byte("w0")}, "medium": "GPU", "group_idx": 1},
	}})
	if b, err = kvevents.Decode(vl); err != nil {
		t.Fatal(err)
	}
	mustApply(t, x, key("vllm", 0), b.Events...)
	got := query(t, x, prompt, "")
	if got["sgl"].GPU != 8 || got["vllm"].GPU != 12 {
		t.Fatalf("%+v", got)
	}
	if st := x.Stats()[key("vllm", 0)]; st.SkippedGroups != 2 || st.BlocksStored != 3 || st.RemovedUnknown != 0 {
		t.Fatalf("vllm stats %+v", st)
	}
}
