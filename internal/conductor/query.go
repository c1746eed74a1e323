package conductor

import (
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvcache-go/mooncake/internal/kvevents"
)

// Query asks which instances hold a prompt's prefix.
type Query struct {
	Identity
	// Instance, if set, restricts the answer to that instance.
	Instance string
	// Tokens are the prompt's token ids (Query); only complete blocks count.
	Tokens []uint32
	// SeqHashes are the prompt's rolling sequence hashes (QueryHashes).
	SeqHashes []uint64
	// MM places the prompt's multimodal inputs (Query): the blocks they
	// overlap are named with them as vLLM names its blocks.
	MM []kvevents.MMFeature
}

// TierMatch is a matched prefix in tokens, cumulative over tiers: GPU is
// the prefix on the device, CPU that prefix extended by host blocks from
// the first device miss, DISK extended again by disk blocks. GPU <= CPU <=
// DISK.
type TierMatch struct {
	GPU  int `json:"GPU"`
	CPU  int `json:"CPU"`
	DISK int `json:"DISK"`
}

// InstanceMatch is one instance's answer: the best of its DP ranks per
// tier, LongestMatched (the best cumulative prefix, DISK), DP (each
// rank's cumulative prefix) and Ranks (each rank's tiers).
type InstanceMatch struct {
	LongestMatched int `json:"longest_matched"`
	TierMatch
	DP    map[string]int       `json:"DP"`
	Ranks map[string]TierMatch `json:"rank_matches"`
}

// Result maps tenant -> instance -> match: the /query answer.
type Result map[string]map[string]InstanceMatch

// candidate is one (instance, rank) a query reports on.
type candidate struct {
	instance string
	rank     int
	s        *stream
	slot     int // -1: holds nothing in the context
}

// Query matches a prompt's tokens against every instance registered for
// the query's tenant and model (or the one it names): per DP rank, the
// device prefix first, then host blocks from the first device miss, then
// disk blocks, each tier's count cumulative. Shared pool blocks (Mooncake
// publishers) count for every instance. Block hashes are computed lazily:
// the walk stops at the first block no candidate can extend.
func (x *Index) Query(q Query) (Result, error) {
	if q.BlockSize <= 0 {
		return nil, fmt.Errorf("%w: block_size must be greater than zero", ErrInvalid)
	}
	n := len(q.Tokens) / q.BlockSize
	src := &seqSource{h: x.h, fast: &x.bh, tokens: q.Tokens, bs: q.BlockSize}
	if len(q.MM) > 0 {
		src.content = make([][]byte, n)
		for i, keys := range kvevents.VLLMExtraKeys(kvevents.VLLMRequest{MM: q.MM}, q.BlockSize, n) {
			src.content[i] = kvevents.ContentKeys(keys)
		}
	}
	return x.match(q, n, src)
}

// QueryHashes is Query with the prompt's sequence hashes given.
func (x *Index) QueryHashes(q Query) (Result, error) {
	if q.BlockSize <= 0 {
		return nil, fmt.Errorf("%w: block_size must be greater than zero", ErrInvalid)
	}
	return x.match(q, len(q.SeqHashes), &seqSource{seqs: q.SeqHashes})
}

// seqSource gives a query's sequence hashes: computed from its tokens, or
// given.
type seqSource struct {
	h      Hasher
	fast   *blockHasher // h's fast path (nil: none)
	tokens []uint32
	bs     int
	seqs   []uint64
	// content are blocks' content keys (nil: none)
	content [][]byte
}

// fill sets dst to the sequence hashes of blocks i, i+1, ... (len(dst) of
// them); prev is block i-1's.
func (s *seqSource) fill(i int, dst []uint64, prev uint64) {
	if s.tokens == nil {
		copy(dst, s.seqs[i:])
		return
	}
	bs := s.bs
	if s.fast != nil && s.content == nil && fastBlockSize(bs) {
		s.fast.seqs(s.tokens, bs, i, dst, prev)
		return
	}
	for j := range dst {
		k := i + j
		l := s.h.Local(s.tokens[k*bs : (k+1)*bs])
		if s.content != nil {
			l = s.h.Fold(l, s.content[k])
		}
		if k > 0 {
			l = s.h.Roll(prev, l)
		}
		prev = l
		dst[j] = l
	}
}

func (x *Index) match(q Query, n int, src *seqSource) (Result, error) {
	if q.Model == "" {
		return nil, fmt.Errorf("%w: model is required", ErrInvalid)
	}
	id := q.Identity.norm()
	x.mu.RLock()
	defer x.mu.RUnlock()
	cands, err := x.candidates(id, q.Instance)
	if err != nil {
		return nil, err
	}
	c := x.ctxs[id]
	var track uint64
	for i := range cands {
		cands[i].slot = -1
		if c == nil {
			continue
		}
		if hd := cands[i].s.in[c]; hd != nil {
			cands[i].slot = int(hd.slot)
			track |= 1 << hd.slot
		}
	}
	if c != nil && c.shared != 0 {
		// Candidates that hold nothing here still reach the shared pool's
		// blocks: walk them on a free slot (its bits are 0 in every mask).
		free := ^(c.used | track)
		for i := range cands {
			if cands[i].slot < 0 && free != 0 {
				b := bits.TrailingZeros64(free)
				free &^= 1 << b
				cands[i].slot = b
				track |= 1 << b
			}
		}
	}
	var lens [numTiers][MaxOwners]int32 // blocks matched per slot, per tier (cumulative)
	if track != 0 {
		walk(c, track, n, src, &lens)
	}
	out := make(map[string]InstanceMatch, len(cands))
	for _, cd := range cands {
		m, ok := out[cd.instance]
		if !ok {
			m = InstanceMatch{DP: make(map[string]int, 1), Ranks: make(map[string]TierMatch, 1)}
		}
		var tm TierMatch
		if cd.slot >= 0 {
			tm = TierMatch{GPU: int(lens[TierDevice][cd.slot]) * q.BlockSize, CPU: int(lens[TierHost][cd.slot]) * q.BlockSize,
				DISK: int(lens[TierDisk][cd.slot]) * q.BlockSize}
		}
		r := strconv.Itoa(cd.rank)
		m.DP[r] = tm.DISK
		m.Ranks[r] = tm
		m.GPU, m.CPU, m.DISK = max(m.GPU, tm.GPU), max(m.CPU, tm.CPU), max(m.DISK, tm.DISK)
		m.LongestMatched = m.DISK
		out[cd.instance] = m
	}
	return Result{id.Tenant: out}, nil
}

// walk advances every tracked slot through the blocks: a slot in the
// device phase stays while the block is on its device, then falls to the
// host phase (the same block checked on its host tier or a shared pool's),
// then to the disk phase, then out. lens records, per tier, the blocks
// matched when the slot left that tier's phase (cumulative).
//
// Blocks go in chunks: a chunk's hashes are computed, then its table
// slots found in one loop of independent loads (their cache and TLB
// misses overlap), then its masks walked in place. Chunks start small, so that a
// short match hashes little past its end, and double up to walkChunk.
func walk(c *ctx, track uint64, n int, src *seqSource, lens *[numTiers][MaxOwners]int32) {
	dev, host, disk := track, uint64(0), uint64(0)
	shared := c.shared
	var seq uint64
	var chunk [walkChunk]uint64
	var at [walkChunk]int32
	var none masks
	i, size := 0, walkChunk/8
	for i < n {
		m := min(size, n-i)
		size = min(2*size, walkChunk)
		src.fill(i, chunk[:m], seq)
		seq = chunk[m-1]
		slotsOf(&c.blocks, chunk[:m], at[:m])
		slots := c.blocks.slots
		for j, a := range at[:m] {
			e := &none
			if a >= 0 {
				e = &slots[a].val
			} else if a == atZero {
				e = &c.blocks.zero
			}
			D, H, K := e[TierDevice], e[TierHost], e[TierDisk]
			if (H|K)&shared != 0 {
				if H&shared != 0 {
					H = ^uint64(0)
				}
				if K&shared != 0 {
					K = ^uint64(0)
				}
			}
			if dev&^D|host&^H|disk&^K == 0 {
				continue // every slot stays in its phase
			}
			at := i + j
			devFall := dev &^ D
			dev &= D
			record(devFall, at, &lens[TierDevice])
			hc := host | devFall
			hostFall := hc &^ H
			host = hc & H
			record(hostFall, at, &lens[TierHost])
			dc := disk | hostFall
			out := dc &^ K
			disk = dc & K
			record(out, at, &lens[TierDisk])
			if dev|host|disk == 0 {
				return
			}
		}
		i += m
	}
	record(dev, n, &lens[TierDevice])
	record(dev|host, n, &lens[TierHost])
	record(dev|host|disk, n, &lens[TierDisk])
}

// walkChunk is the most blocks walk hashes and loads at once.
const walkChunk = 64

func record(set uint64, i int, to *[MaxOwners]int32) {
	for set != 0 {
		b := bits.TrailingZeros64(set)
		to[b] = int32(i)
		set &= set - 1
	}
}

// candidates are the (instance, rank) pairs a query reports on: engine
// publishers registered for its tenant and model with its block size.
// (x.mu held.)
func (x *Index) candidates(id Identity, instance string) ([]candidate, error) {
	out := make([]candidate, 0, 8)
	modelKnown, instKnown := false, false
	for _, s := range x.streams {
		r := &s.reg
		if r.Kind.shared() || r.Tenant != id.Tenant || r.Model != id.Model {
			continue
		}
		modelKnown = true
		if instance != "" && r.Instance != instance {
			continue
		}
		instKnown = true
		if r.BlockSize == id.BlockSize {
			out = append(out, candidate{instance: r.Instance, rank: r.DPRank, s: s})
		}
	}
	if instance != "" && !instKnown {
		return nil, fmt.Errorf("%w: %q is not registered for tenant %q and model %q", ErrUnknownInstance, instance, id.Tenant, id.Model)
	}
	if modelKnown && len(out) == 0 {
		return nil, fmt.Errorf("%w: %d asked, registered: %s", ErrBlockSize, id.BlockSize, x.blockSizes(id, instance))
	}
	slices.SortFunc(out, func(a, b candidate) int {
		if c := strings.Compare(a.instance, b.instance); c != 0 {
			return c
		}
		return a.rank - b.rank
	})
	return out, nil
}

// blockSizes lists the block sizes the model's instances registered
// (x.mu held).
func (x *Index) blockSizes(id Identity, instance string) string {
	sizes := map[int]bool{}
	for _, s := range x.streams {
		r := s.reg
		if !r.Kind.shared() && r.Tenant == id.Tenant && r.Model == id.Model && (instance == "" || r.Instance == instance) {
			sizes[r.BlockSize] = true
		}
	}
	var l []string
	for s := range sizes {
		l = append(l, strconv.Itoa(s))
	}
	sort.Strings(l)
	return strings.Join(l, ", ")
}

// ContextView describes one context in GlobalView.
type ContextView struct {
	Tenant      string           `json:"tenant_id"`
	Model       string           `json:"model_name"`
	Lora        string           `json:"lora_name"`
	Salt        string           `json:"additional_salt"`
	BlockSize   int              `json:"block_size"`
	PrefixCount int              `json:"prefix_count"`
	Instances   map[string][]int `json:"instances"`
	Blocks      map[string]int   `json:"blocks"` // blocks held per tier, summed over owners
}

// View is the /global_view answer.
type View struct {
	ContextCount int           `json:"context_count"`
	Contexts     []ContextView `json:"contexts"`
	Blocks       int           `json:"blocks"`
}

// GlobalView lists every context with its block count and owners. Its
// cost grows with contexts and owners, not blocks (counts are kept as
// blocks come and go).
func (x *Index) GlobalView() View {
	x.mu.RLock()
	defer x.mu.RUnlock()
	v := View{Contexts: []ContextView{}, Blocks: x.blocks}
	for _, c := range x.ctxs {
		cv := ContextView{Tenant: c.id.Tenant, Model: c.id.Model, Lora: c.id.Lora, Salt: c.id.Salt, BlockSize: c.id.BlockSize,
			PrefixCount: c.blocks.Len(), Instances: map[string][]int{}, Blocks: map[string]int{}}
		for _, o := range c.owners {
			if o == nil {
				continue
			}
			cv.Instances[o.reg.Instance] = append(cv.Instances[o.reg.Instance], o.reg.DPRank)
			h := o.in[c]
			for t := Tier(0); t < numTiers; t++ {
				cv.Blocks[t.String()] += h.live[t]
			}
		}
		for _, r := range cv.Instances {
			sort.Ints(r)
		}
		v.Contexts = append(v.Contexts, cv)
	}
	sort.Slice(v.Contexts, func(i, j int) bool {
		a, b := v.Contexts[i], v.Contexts[j]
		return fmt.Sprint(a.Tenant, a.Model, a.Lora, a.Salt, a.BlockSize) < fmt.Sprint(b.Tenant, b.Model, b.Lora, b.Salt, b.BlockSize)
	})
	v.ContextCount = len(v.Contexts)
	return v
}
