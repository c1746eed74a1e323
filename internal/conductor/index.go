package conductor

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Errors the index returns; the HTTP edge maps them to status codes.
var (
	// ErrInvalid: a registration or query misses a field or has a bad value.
	ErrInvalid = errors.New("conductor: invalid request")
	// ErrUnknownInstance: a query names an instance not registered for its
	// tenant and model.
	ErrUnknownInstance = errors.New("conductor: unknown instance")
	// ErrUnknownStream: an unregister or an event names no registered
	// publisher.
	ErrUnknownStream = errors.New("conductor: unknown publisher")
	// ErrBlockSize: a query's block_size is not the one its model's
	// instances registered.
	ErrBlockSize = errors.New("conductor: block_size does not match the registered instances")
	// ErrOwnersFull: a context already has MaxOwners publishers.
	ErrOwnersFull = errors.New("conductor: too many publishers in one context")
)

// MaxOwners is how many publishers (instance and DP rank pairs, and shared
// pools) one context can hold: each is one bit of a block's per-tier masks.
const MaxOwners = 64

// DefaultTenant is the tenant of requests and registrations that name none.
const DefaultTenant = "default"

// Kind is a publisher's type, the register call's "type".
type Kind string

// Publisher kinds. A Mooncake publisher is a shared KV pool (the store
// master): its host and disk blocks serve every instance of the context,
// and it is never a routing target itself. Engines' (vLLM, SGLang) blocks
// are their own.
const (
	KindVLLM     Kind = "vLLM"
	KindSGLang   Kind = "SGLang"
	KindMooncake Kind = "Mooncake"
)

// ParseKind reads a publisher type, case-insensitively.
func ParseKind(s string) (Kind, bool) {
	switch strings.ToLower(s) {
	case "vllm":
		return KindVLLM, true
	case "sglang":
		return KindSGLang, true
	case "mooncake":
		return KindMooncake, true
	}
	return "", false
}

func (k Kind) shared() bool { return k == KindMooncake }

// Identity is what makes KV blocks interchangeable: blocks are indexed,
// and prefixes matched, only within one Identity (a context).
type Identity struct {
	Tenant    string // "" is DefaultTenant
	Model     string
	Lora      string // "" the base model
	Salt      string // additional_salt / cache_salt namespace
	BlockSize int
}

func (id Identity) norm() Identity {
	if id.Tenant == "" {
		id.Tenant = DefaultTenant
	}
	return id
}

// Registration is one publisher: an instance's DP rank (or a pool) whose
// events the index follows.
type Registration struct {
	Kind           Kind
	Endpoint       string // ZMQ PUB endpoint (the service dials it; the core keeps it for views)
	ReplayEndpoint string
	Instance       string
	DPRank         int
	Identity
}

// Key is the registration's stream key.
func (r Registration) Key() StreamKey {
	return StreamKey{Instance: r.Instance, Tenant: r.Identity.norm().Tenant, DPRank: r.DPRank}
}

// Validate checks the fields the index needs.
func (r Registration) Validate() error {
	switch {
	case r.Instance == "":
		return fmt.Errorf("%w: instance_id is required", ErrInvalid)
	case r.Model == "":
		return fmt.Errorf("%w: modelname is required", ErrInvalid)
	case r.BlockSize <= 0:
		return fmt.Errorf("%w: block_size must be greater than zero", ErrInvalid)
	case r.DPRank < 0:
		return fmt.Errorf("%w: dp_rank must be non-negative", ErrInvalid)
	}
	if _, ok := ParseKind(string(r.Kind)); !ok {
		return fmt.Errorf("%w: type %q (want vLLM, SGLang or Mooncake)", ErrInvalid, r.Kind)
	}
	return nil
}

// StreamKey names a registered publisher: (instance_id, tenant_id,
// dp_rank), as Mooncake's conductor keys its subscriptions.
type StreamKey struct {
	Instance string
	Tenant   string
	DPRank   int
}

// String is "instance|tenant|rank", the form /unregister answers.
func (k StreamKey) String() string {
	return k.Instance + "|" + k.Tenant + "|" + strconv.Itoa(k.DPRank)
}

// Config configures an Index.
type Config struct {
	// Seed is the XXH3 seed of the hashing standard (0: DefaultSeed).
	Seed uint64
	// MaxBlocks bounds the distinct blocks indexed over all contexts (0:
	// no bound). Blocks stored beyond it are refused and counted
	// (StreamStats.CapacityDropped); the index never evicts on its own.
	MaxBlocks int
}

// masks holds, per tier, one bit per owner slot of the context.
type masks [numTiers]uint64

// ctx is one context's blocks and owners.
type ctx struct {
	id     Identity
	blocks table[masks] // sequence hash -> owners per tier
	owners [MaxOwners]*stream
	used   uint64 // owner slots in use
	shared uint64 // slots of shared pools
	// memo remembers which sequence hash an engine's own block hash named
	// (digest -> seq), beyond the engine's eviction: a pool object saved
	// from a block the engine has since evicted still resolves. Bounded:
	// emptied when it outgrows memoBound.
	memo table[uint64]
}

// memoBound is how many engine hashes a context remembers: twice its
// blocks, and at least 64Ki.
func (c *ctx) memoBound() int { return max(2*c.blocks.Len(), 1<<16) }

// remember records that the engine hash digest k names seq.
func (c *ctx) remember(k, seq uint64) {
	if c.memo.Len() >= c.memoBound() {
		c.memo = table[uint64]{}
	}
	p, _ := c.memo.Ptr(k)
	*p = seq
}

// held is what one stream holds in one context. Blocks published under
// their own sequence hash (standard publishers) are only bits in the
// context's table; alias keeps the others: published hash key -> sequence
// hash and the tiers held.
type held struct {
	slot  uint8
	alias table[alias]
	live  [numTiers]int
}

func (h *held) total() int { return h.live[0] + h.live[1] + h.live[2] }

type alias struct {
	seq   uint64
	tiers uint8
}

type stream struct {
	reg   Registration
	in    map[*ctx]*held
	skip  map[int]bool // KV cache groups that are not full attention
	stats StreamStats
}

// StreamStats counts one publisher's events. Stored and removed streams
// that fall out of step show as RemovedUnknown (removals of blocks never
// stored: stored events were lost) and as Live growing past what the
// engine can hold (removals lost).
type StreamStats struct {
	Batches         uint64 // batches applied
	BlocksStored    uint64 // blocks indexed by stored events
	BlocksRemoved   uint64 // blocks dropped by removed events
	StoredDuplicate uint64 // stored again while held (same tier)
	RemovedUnknown  uint64 // removed blocks the index did not hold
	Orphaned        uint64 // stored blocks whose parent was unknown (not indexed)
	Unhashable      uint64 // stored blocks without token ids from a non-standard publisher
	Unresolved      uint64 // pool objects whose key names no known block
	SkippedGroups   uint64 // blocks of KV cache groups other than full attention
	BadMedium       uint64 // events with a medium of no known tier
	CapacityDropped uint64 // blocks refused at Config.MaxBlocks
	OwnersFull      uint64 // blocks refused: the context had MaxOwners publishers
	Clears          uint64 // cleared events (and publisher restarts)
	Live            int    // blocks held now, over tiers
}

// Index is the conductor's index: per context, which owner holds which
// block in which tier. Safe for concurrent use; queries share a read lock,
// events take the write lock for one batch.
type Index struct {
	cfg Config
	h   Hasher
	bh  blockHasher // h's fast path

	mu      sync.RWMutex
	streams map[StreamKey]*stream
	ctxs    map[Identity]*ctx
	blocks  int // distinct blocks over all contexts

	seqBuf []uint64 // scratch of Apply (x.mu held)
	tokBuf []uint32
}

// New returns an empty index.
func New(cfg Config) *Index {
	if cfg.Seed == 0 {
		cfg.Seed = DefaultSeed
	}
	return &Index{cfg: cfg, h: NewHasher(cfg.Seed), bh: newBlockHasher(cfg.Seed), streams: map[StreamKey]*stream{}, ctxs: map[Identity]*ctx{}}
}

// Hasher is the index's hashing standard.
func (x *Index) Hasher() Hasher { return x.h }

// Register adds a publisher. Registering the same key again with the same
// registration is a no-op (created false); with a different one it
// replaces it, forgetting what the old one held.
func (x *Index) Register(r Registration) (created bool, err error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	r.Identity = r.Identity.norm()
	r.Kind, _ = ParseKind(string(r.Kind))
	k := r.Key()
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.streams[k]; s != nil {
		if s.reg == r {
			return false, nil
		}
		x.dropStream(s)
	}
	x.streams[k] = &stream{reg: r, in: map[*ctx]*held{}}
	return true, nil
}

// Unregister removes a publisher and everything it held.
func (x *Index) Unregister(k StreamKey) (Registration, error) {
	if k.Tenant == "" {
		k.Tenant = DefaultTenant
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.streams[k]
	if s == nil {
		return Registration{}, fmt.Errorf("%w: %s", ErrUnknownStream, k)
	}
	x.dropStream(s)
	delete(x.streams, k)
	return s.reg, nil
}

// Registrations lists the registered publishers, by key.
func (x *Index) Registrations() []Registration {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]Registration, 0, len(x.streams))
	for _, s := range x.streams {
		out = append(out, s.reg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key().String() < out[j].Key().String() })
	return out
}

// Stats returns each publisher's counters.
func (x *Index) Stats() map[StreamKey]StreamStats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make(map[StreamKey]StreamStats, len(x.streams))
	for k, s := range x.streams {
		st := s.stats
		st.Live = 0
		for _, h := range s.in {
			st.Live += h.total()
		}
		out[k] = st
	}
	return out
}

// Blocks is the number of distinct blocks indexed, over all contexts.
func (x *Index) Blocks() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.blocks
}

// dropStream forgets everything s holds (x.mu held).
func (x *Index) dropStream(s *stream) {
	for c := range s.in {
		x.dropHeld(s, c, numTiers)
	}
}

// dropHeld clears s's bits in c, in tier t or in every tier (t ==
// numTiers); the slot is freed when nothing is left. It scans the
// context's blocks: a clear costs what the context holds.
func (x *Index) dropHeld(s *stream, c *ctx, t Tier) {
	h := s.in[c]
	if h == nil {
		return
	}
	bit := uint64(1) << h.slot
	var seqs []uint64
	c.blocks.Range(func(k uint64, m masks) bool {
		for tt := Tier(0); tt < numTiers; tt++ {
			if (t == numTiers || t == tt) && m[tt]&bit != 0 {
				seqs = append(seqs, k)
				break
			}
		}
		return true
	})
	for _, k := range seqs {
		for tt := Tier(0); tt < numTiers; tt++ {
			if t == numTiers || t == tt {
				x.clearBit(c, k, tt, bit)
			}
		}
	}
	if t == numTiers {
		h.alias = table[alias]{}
		h.live = [numTiers]int{}
	} else {
		h.live[t] = 0
		var keys []uint64
		h.alias.Range(func(k uint64, a alias) bool {
			if a.tiers&(1<<t) != 0 {
				keys = append(keys, k)
			}
			return true
		})
		for _, k := range keys {
			p := h.alias.Find(k)
			if p.tiers &^= 1 << t; p.tiers == 0 {
				h.alias.Delete(k)
			}
		}
	}
	if h.total() == 0 {
		x.freeSlot(s, c, h)
	}
}

func (x *Index) freeSlot(s *stream, c *ctx, h *held) {
	bit := uint64(1) << h.slot
	c.used &^= bit
	c.shared &^= bit
	c.owners[h.slot] = nil
	delete(s.in, c)
	if c.used == 0 && c.blocks.Len() == 0 {
		delete(x.ctxs, c.id) // the memo goes with it: nobody is left to name
	}
}

func (x *Index) clearBit(c *ctx, seq uint64, t Tier, bit uint64) {
	e := c.blocks.Find(seq)
	if e == nil {
		return
	}
	e[t] &^= bit
	if *e == (masks{}) {
		c.blocks.Delete(seq)
		x.blocks--
	}
}

// setBit marks seq held by bit in tier t; false when the block is new and
// the index is at capacity.
func (x *Index) setBit(c *ctx, seq uint64, t Tier, bit uint64) bool {
	e := c.blocks.Find(seq)
	if e == nil {
		if x.cfg.MaxBlocks > 0 && x.blocks >= x.cfg.MaxBlocks {
			return false
		}
		x.blocks++
		e, _ = c.blocks.Ptr(seq)
	}
	e[t] |= bit
	return true
}

// heldIn returns s's holding in the context id, allocating a slot (and
// the context) on first use; nil when the context is full.
func (x *Index) heldIn(s *stream, id Identity) (*ctx, *held) {
	c := x.ctxs[id]
	if c == nil {
		c = &ctx{id: id}
		x.ctxs[id] = c
	}
	if h := s.in[c]; h != nil {
		return c, h
	}
	if c.used == ^uint64(0) {
		return c, nil
	}
	slot := uint8(bits.TrailingZeros64(^c.used))
	c.used |= 1 << slot
	if s.reg.Kind.shared() {
		c.shared |= 1 << slot
	}
	c.owners[slot] = s
	h := &held{slot: slot}
	s.in[c] = h
	return c, h
}
