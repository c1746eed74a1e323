package conductor

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/kvcache-go/mooncake/internal/kvevents"
)

// Apply feeds one batch of a publisher's events, in order. Events are
// normalized to the index's identity: a context from the registration
// with the event's own lora_name, block_size (and, for standard events,
// model_name, additional_salt, tenant_id) where it carries them; the tier
// from its medium; and blocks named by the standard sequence hash,
// recomputed from token_ids when the event has them (so any engine hash
// works: vLLM's SHA-256 bytes or Python hash integers, SGLang's, ours),
// taken as given from a standard event without token_ids, and for a
// Mooncake pool read from the object key (a decimal or 0x u64 sequence
// hash, or a key ending in the hex of an engine block hash that another
// publisher of the context announced). What cannot be indexed is counted
// in StreamStats, never guessed.
func (x *Index) Apply(k StreamKey, b kvevents.Batch) error {
	if k.Tenant == "" {
		k.Tenant = DefaultTenant
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.streams[k]
	if s == nil {
		return fmt.Errorf("%w: %s", ErrUnknownStream, k)
	}
	s.stats.Batches++
	for _, e := range b.Events {
		switch e := e.(type) {
		case kvevents.BlockStored:
			x.stored(s, e)
		case kvevents.BlockRemoved:
			x.removed(s, e)
		case kvevents.AllBlocksCleared:
			s.stats.Clears++
			x.dropStream(s)
		case kvevents.Standard:
			x.standard(s, e)
		}
	}
	return nil
}

// Clear forgets everything publisher k holds (its publisher restarted, or
// events were lost and not replayed).
func (x *Index) Clear(k StreamKey) {
	if k.Tenant == "" {
		k.Tenant = DefaultTenant
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.streams[k]; s != nil {
		s.stats.Clears++
		x.dropStream(s)
	}
}

// hashKey is the u64 a published hash is remembered by.
func hashKey(h kvevents.Hash) uint64 {
	if h.IsBytes {
		return digest(h.Bytes)
	}
	return h.Int
}

// fullAttention reports whether a KV cache group kind indexes prefixes
// ("" when the engine has one group).
func fullAttention(kind string) bool {
	k := strings.ToLower(kind)
	return k == "" || strings.Contains(k, "full")
}

func (x *Index) stored(s *stream, e kvevents.BlockStored) {
	if !fullAttention(e.KVCacheSpecKind) {
		if e.GroupIdx != nil {
			if s.skip == nil {
				s.skip = map[int]bool{}
			}
			s.skip[*e.GroupIdx] = true
		}
		s.stats.SkippedGroups += uint64(len(e.BlockHashes))
		return
	}
	id := s.reg.Identity
	if e.LoraName != "" {
		id.Lora = e.LoraName
	}
	if e.BlockSize > 0 && !s.reg.Kind.shared() {
		// An engine's own block size; a pool's events carry its
		// publisher's default, not the model's (the registration has it).
		id.BlockSize = e.BlockSize
	}
	in := storedIn{id: id, medium: e.Medium, hashes: e.BlockHashes, parent: e.ParentBlockHash, tokens: e.TokenIDs}
	if len(e.ExtraKeys) == len(e.BlockHashes) {
		// vLLM's extra keys: the strings are identity (the LoRA name,
		// and a request's cache salt in its first block, which puts the
		// chain in that salt's context); the rest name content.
		if e.ParentBlockHash == nil {
			if salt := kvevents.RequestSalt(e.ExtraKeys[0], e.LoraName); salt != "" {
				in.id.Salt = salt
			}
		} else if c := x.parentCtx(s, in.id, hashKey(*e.ParentBlockHash)); c != nil {
			in.id = c.id // the chain's context, salted by its first block
		}
		for i, keys := range e.ExtraKeys {
			if b := kvevents.ContentKeys(keys); b != nil {
				if in.content == nil {
					in.content = make([][]byte, len(e.ExtraKeys))
				}
				in.content[i] = b
			}
		}
	}
	x.store(s, in)
}

// parentCtx is the context of id but for its salt in which s holds the
// block it published as k (nil: none).
func (x *Index) parentCtx(s *stream, id Identity, k uint64) *ctx {
	id = id.norm()
	if c := x.ctxs[id]; c != nil {
		if h := s.in[c]; h != nil {
			if _, ok := lookup(c, h, k); ok {
				return c
			}
		}
	}
	for c, h := range s.in {
		ci := c.id
		if ci.Tenant != id.Tenant || ci.Model != id.Model || ci.Lora != id.Lora || ci.BlockSize != id.BlockSize || ci.Salt == id.Salt {
			continue
		}
		if _, ok := lookup(c, h, k); ok {
			return c
		}
	}
	return nil
}

func (x *Index) removed(s *stream, e kvevents.BlockRemoved) {
	if e.GroupIdx != nil && s.skip[*e.GroupIdx] {
		s.stats.SkippedGroups += uint64(len(e.BlockHashes))
		return
	}
	x.remove(s, e.Medium, e.BlockHashes)
}

func (x *Index) standard(s *stream, e kvevents.Standard) {
	switch e.EventType {
	case kvevents.EventStored:
		id := s.reg.Identity
		if e.ModelName != "" {
			id.Model = e.ModelName
		}
		if e.LoraName != "" {
			id.Lora = e.LoraName
		}
		if e.AdditionalSalt != "" {
			id.Salt = e.AdditionalSalt
		}
		if e.BlockSize > 0 {
			id.BlockSize = e.BlockSize
		}
		hs := e.SeqHashes
		if len(hs) == 0 && e.ObjectKey != "" {
			hs = []kvevents.Hash{kvevents.BytesHash([]byte(e.ObjectKey))}
		}
		in := storedIn{id: id, medium: e.Medium, hashes: hs, parent: e.ParentHash, tokens: e.TokenIDs,
			standard: len(e.SeqHashes) > 0, root: e.BaseBlockIdx != nil && *e.BaseBlockIdx == 0}
		x.store(s, in)
	case kvevents.EventRemoved:
		hs := e.SeqHashes
		if len(hs) == 0 && e.ObjectKey != "" {
			hs = []kvevents.Hash{kvevents.BytesHash([]byte(e.ObjectKey))}
		}
		x.remove(s, e.Medium, hs)
	case kvevents.EventCleared:
		s.stats.Clears++
		if t, ok := ParseMedium(e.Medium); ok && e.Medium != "" {
			for c := range s.in {
				x.dropHeld(s, c, t)
			}
			return
		}
		x.dropStream(s)
	}
}

// storedIn is a stored event, normalized.
type storedIn struct {
	id       Identity
	medium   string
	hashes   []kvevents.Hash
	parent   *kvevents.Hash
	tokens   []int
	content  [][]byte // per block, content keys folded into its hash (nil: none)
	standard bool     // hashes are standard sequence hashes
	root     bool     // the first block is at depth 0 (parent ignored)
}

func (x *Index) store(s *stream, in storedIn) {
	n := uint64(len(in.hashes))
	t, ok := ParseMedium(in.medium)
	if !ok {
		s.stats.BadMedium += n
		return
	}
	c, h := x.heldIn(s, in.id.norm())
	if h == nil {
		s.stats.OwnersFull += n
		return
	}
	if cap(x.seqBuf) < len(in.hashes) {
		x.seqBuf = make([]uint64, len(in.hashes))
	}
	seqs := x.seqBuf[:len(in.hashes)]
	bs := in.id.BlockSize
	switch {
	case len(in.tokens) > 0 && len(in.tokens) == len(in.hashes)*bs:
		var parent uint64
		hasParent := false
		if in.parent != nil && !in.root {
			a, ok := lookup(c, h, hashKey(*in.parent))
			if !ok {
				s.stats.Orphaned += n
				x.releaseIfEmpty(s, c, h)
				return
			}
			parent, hasParent = a.seq, true
		}
		if cap(x.tokBuf) < len(in.tokens) {
			x.tokBuf = make([]uint32, len(in.tokens))
		}
		toks := x.tokBuf[:len(in.tokens)]
		for i, v := range in.tokens {
			toks[i] = uint32(v)
		}
		fast := fastBlockSize(bs)
		for i := range in.hashes {
			var l uint64
			if fast {
				l = x.bh.localTokens(toks[i*bs : (i+1)*bs])
			} else {
				l = x.h.Local(toks[i*bs : (i+1)*bs])
			}
			if in.content != nil {
				l = x.h.Fold(l, in.content[i])
			}
			if hasParent {
				l = x.bh.roll(parent, l)
			}
			parent, hasParent = l, true
			seqs[i] = parent
		}
	case in.standard:
		for i, hh := range in.hashes {
			seqs[i] = hashKey(hh)
		}
	case s.reg.Kind.shared():
		for i, hh := range in.hashes {
			seq, ok := x.resolveKey(c, hh)
			if !ok {
				s.stats.Unresolved++
				seqs[i] = 0
				continue
			}
			seqs[i] = seq
		}
	default:
		s.stats.Unhashable += n
		x.releaseIfEmpty(s, c, h)
		return
	}
	bit := uint64(1) << h.slot
	for i, hh := range in.hashes {
		seq := seqs[i]
		if seq == 0 && s.reg.Kind.shared() {
			continue // unresolved, counted
		}
		k := hashKey(hh)
		if k == seq && h.alias.n == 0 && !h.alias.hasZero {
			// A block named by its sequence hash: one probe of the table.
			e := c.blocks.Find(seq)
			if e != nil && e[t]&bit != 0 {
				s.stats.StoredDuplicate++
				continue
			}
			if e == nil {
				if x.cfg.MaxBlocks > 0 && x.blocks >= x.cfg.MaxBlocks {
					s.stats.CapacityDropped++
					continue
				}
				x.blocks++
				e, _ = c.blocks.Ptr(seq)
			}
			e[t] |= bit
			h.live[t]++
			s.stats.BlocksStored++
			continue
		}
		a, had := lookup(c, h, k)
		if had && a.seq != seq {
			// The publisher reuses a hash for other content: the old block is gone.
			x.dropAlias(c, h, k, a, bit)
			a, had = alias{}, false
		}
		if had && a.tiers&(1<<t) != 0 {
			s.stats.StoredDuplicate++
			continue
		}
		if !x.setBit(c, seq, t, bit) {
			s.stats.CapacityDropped++
			continue
		}
		if k != seq {
			p, _ := h.alias.Ptr(k)
			p.seq = seq
			p.tiers |= 1 << t
			if !s.reg.Kind.shared() {
				c.remember(k, seq)
			}
		}
		h.live[t]++
		s.stats.BlocksStored++
	}
	x.releaseIfEmpty(s, c, h)
}

// lookup is what h holds under published key k: its alias, or the block
// k itself when the publisher names blocks by their sequence hash.
func lookup(c *ctx, h *held, k uint64) (alias, bool) {
	if a, ok := h.alias.Get(k); ok {
		return a, true
	}
	e := c.blocks.Find(k)
	if e == nil {
		return alias{}, false
	}
	a := alias{seq: k}
	bit := uint64(1) << h.slot
	for t := Tier(0); t < numTiers; t++ {
		if e[t]&bit != 0 {
			a.tiers |= 1 << t
		}
	}
	return a, a.tiers != 0
}

func (x *Index) dropAlias(c *ctx, h *held, k uint64, a alias, bit uint64) {
	for t := Tier(0); t < numTiers; t++ {
		if a.tiers&(1<<t) != 0 {
			x.clearBit(c, a.seq, t, bit)
			h.live[t]--
		}
	}
	h.alias.Delete(k)
}

// releaseIfEmpty frees a slot taken for an event that indexed nothing.
func (x *Index) releaseIfEmpty(s *stream, c *ctx, h *held) {
	if h.total() == 0 {
		x.freeSlot(s, c, h)
	}
}

func (x *Index) remove(s *stream, medium string, hs []kvevents.Hash) {
	t, ok := ParseMedium(medium)
	if !ok {
		s.stats.BadMedium += uint64(len(hs))
		return
	}
	for _, hh := range hs {
		k := hashKey(hh)
		found := false
		for c, h := range s.in {
			bit := uint64(1) << h.slot
			if h.alias.n == 0 && !h.alias.hasZero {
				// Named by its sequence hash: one probe of the table.
				e := c.blocks.Find(k)
				if e == nil || e[t]&bit == 0 {
					continue
				}
				found = true
				if e[t] &^= bit; *e == (masks{}) {
					c.blocks.Delete(k)
					x.blocks--
				}
				h.live[t]--
				s.stats.BlocksRemoved++
				if h.total() == 0 {
					x.freeSlot(s, c, h)
				}
				break
			}
			a, ok := lookup(c, h, k)
			if !ok || a.tiers&(1<<t) == 0 {
				continue
			}
			found = true
			x.clearBit(c, a.seq, t, uint64(1)<<h.slot)
			h.live[t]--
			if a.seq != k {
				p := h.alias.Find(k)
				if p.tiers &^= 1 << t; p.tiers == 0 {
					h.alias.Delete(k)
				}
			}
			s.stats.BlocksRemoved++
			if h.total() == 0 {
				x.freeSlot(s, c, h)
			}
			break
		}
		if !found {
			s.stats.RemovedUnknown++
		}
	}
}

// resolveKey names a pool object by its sequence hash: its key is the
// hash (decimal or 0x hex, Mooncake's convention), or ends in the hex of
// an engine's block hash (our store connector's keys: prefix + hex of the
// SHA-256 chain) that an engine publisher of the context announced (even
// if it has evicted it since: the context's memo).
func (x *Index) resolveKey(c *ctx, h kvevents.Hash) (uint64, bool) {
	if !h.IsBytes {
		return h.Int, h.Int != 0
	}
	key := string(h.Bytes)
	if v, ok := kvevents.ParseKeyHash(key); ok {
		return v, v != 0
	}
	if len(key) < 64 {
		return 0, false
	}
	raw, err := hex.DecodeString(key[len(key)-64:])
	if err != nil {
		return 0, false
	}
	k := digest(raw)
	if seq, ok := c.memo.Get(k); ok {
		return seq, true
	}
	for _, o := range c.owners {
		if o == nil || o.reg.Kind.shared() {
			continue
		}
		if oh := o.in[c]; oh != nil {
			if a, ok := oh.alias.Get(k); ok {
				return a.seq, true
			}
		}
	}
	return 0, false
}
