// Package conductor is the KV cache indexer behind `mooncake conductor`:
// which instance holds which prefix of a prompt, on which tier, answering
// Mooncake's Indexer API (docs/conductor.md). This package is the pure
// core: no sockets, no clock; internal/conductor/service puts it behind
// HTTP and ZMQ.
//
// # Identity
//
// Blocks are indexed per context, Identity{Tenant, Model, Lora, Salt,
// BlockSize}: blocks of different models, adapters, salts (additional_salt
// on events and registrations, cache_salt on queries) or block sizes never
// match. Within a context each publisher is an owner slot (MaxOwners, 64:
// one bit of a block's per-tier masks). A publisher is a Registration,
// keyed (instance_id, tenant_id, dp_rank); instance_id is the routing
// target, while events name their cache owner (backend_id) themselves. A
// Mooncake publisher is a shared pool (the store master): its blocks serve
// every instance of the context and it is never a target.
//
// # Hashing standard
//
// Blocks are named by XXH3-64 with a seed (DefaultSeed 1337) over the
// block's tokens as little-endian u32, rolled: seq[0] = local[0], seq[i] =
// XXH3(le64(seq[i-1]) || le64(local[i]), seed) (Hasher, checked against
// Python's xxhash in testdata; for blocks of 5 to 32 tokens and the roll,
// queries and ingest use XXH3 written out for those lengths, checked
// against the library and the same vectors). Events with token_ids are
// recomputed in this standard, whatever the engine's own hash (vLLM's
// SHA-256 bytes or integers, SGLang's, ours): the index remembers, per
// publisher, which of its hashes names which sequence hash, so parents and
// removals resolve. Standard events (event_type stored/removed/cleared)
// without token_ids are taken as standard sequence hashes. A pool's object
// key is the hash (decimal or 0x u64) or ends in the hex of an engine's
// block hash that an engine publisher of the context announced (the
// context's memo keeps engine hashes past their eviction, up to twice its
// blocks). Blocks named by their sequence hash cost one table entry;
// engine-named ones also an alias and a memo entry.
//
// vLLM's extra keys (kvevents.VLLMExtraKeys: the LoRA name, multimodal
// inputs, a request's cache salt) name blocks as they do in vLLM: the
// strings are identity (the LoRA name is the context's adapter; a cache
// salt in a chain's first block puts the chain in that salt's context,
// and the chain's later events follow their parent there), the rest is
// content, folded into the block's local hash (Hasher.Fold). A query's
// multimodal inputs (Query.MM) give its blocks the same keys.
//
// # Tiers and matching
//
// Tiers are G1 device, G2 host, G3 disk (ParseMedium reads every engine's
// medium names). Query walks the prompt's blocks once, for every candidate
// (instance, DP rank) at the same time with bit masks: a candidate matches
// on its device first, then from its first device miss on host blocks
// (its own or a pool's), then on disk, each count cumulative (GPU <= CPU
// <= DISK); LongestMatched is DISK. An instance reports the best of its
// ranks per tier, DP per rank, and Ranks per rank and tier. The walk stops
// as soon as no candidate can extend its prefix, and hashes blocks only up
// to there (a chunk at most past it: blocks are hashed, then their table
// entries loaded, a chunk at a time, so that the loads overlap).
//
// # Capacity and counters
//
// A block table past 4 MiB asks for transparent huge pages (a long prompt's
// lookups land on random pages of it). Config.MaxBlocks bounds the distinct
// blocks; past it stored blocks are refused and counted. StreamStats counts
// per publisher what was stored, removed, duplicated, removed unknown
// (stored events lost), orphaned (parent unknown), unhashable (no token ids
// from a non-standard engine), unresolved (pool keys), skipped (KV cache
// groups other than full attention), and Live (held now): when stored and
// removed streams fall out of step it shows there.
package conductor
