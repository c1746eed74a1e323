// Package kvevents speaks vLLM's KV cache events (vllm/distributed/
// kv_events.py): the engine's prefix cache announces the blocks it stores
// and evicts, and a router indexes instances by cache from them.
//
// # Wire format
//
// A ZMQ PUB socket sends one message per batch, three frames: the topic
// (Config.Topic, "" by default; vLLM's users put "kv@<pod>@<model>"), the
// batch's sequence number as 8 bytes big-endian (0, 1, 2, ... per
// publisher), and the msgpack payload EventBatch {ts, events,
// data_parallel_rank}. Events are tagged structs: BlockStored
// {block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
// lora_name}, BlockRemoved {block_hashes, medium}, AllBlocksCleared {}.
// vLLM has used two encodings, and Decode reads both:
//
//	array (older, msgspec array_like):  [ts, [["BlockStored", [h...], parent, [tok...], 16, null, "GPU"], ...], 0]
//	map   (newer):                      {"ts": ..., "events": [{"type": "BlockStored", "block_hashes": [...], ...}], "data_parallel_rank": 0}
//
// Decode also reads the standardized events (Standard: a map with
// event_type stored / removed / cleared, the envelope and seq_hashes,
// base_block_idx, parent_hash, token_ids, object_key; Mooncake's store
// master sends them, with legacy aliases), in either batch encoding, and
// vLLM's newer fields (extra_keys, group_idx, kv_cache_spec_kind).
//
// A block hash is an integer (older vLLM, 64-bit) or bytes (newer vLLM, and
// ours: the 32-byte SHA-256 chain of docs/kv-block-identity.md). Encode
// writes either encoding (Config.MapEncoding) with bytes hashes.
//
// An optional ZMQ ROUTER replay socket answers a request (frames: empty
// delimiter, 8-byte big-endian start sequence) with every buffered batch
// from that sequence on ([empty, seq, payload] each, the last BufferSteps
// batches are kept) and then an end marker [empty, -1 as 8 bytes, empty].
//
// # vLLM's block hashes
//
// VLLMHasher computes the hashes vLLM's prefix cache names blocks by:
// its --prefix-caching-hash-algo (sha256 over pickle, its default;
// sha256_cbor; xxhash; xxhash_cbor) over (parent hash, block tokens,
// extra keys), the first block's parent derived from PYTHONHASHSEED, and
// VLLMIntHash their integer form. VLLMExtraKeys forms a request's extra
// keys per block as vLLM does (the LoRA name, the multimodal inputs a
// block overlaps with their offset in it, the cache salt in the first
// block); BlockStored.ExtraKeys carries them as the engine published
// them, and ContentKeys and RequestSalt split them into what names
// content and what names a namespace. The tests check all of it against
// vLLM's own hashing functions (testdata/vllm_block_hashes.json, written
// by scripts/vllm-block-hash-vectors.py) and the pickle writer against
// CPython's.
//
// # Publisher
//
// NewPublisher checks the config; Run(ctx) binds the PUB (and replay)
// sockets and sends what Publish queues until ctx ends. Publish never
// blocks (the engine calls it from its step goroutine): a full queue drops
// the batch and counts it (Dropped). BlockStored, BlockRemoved and
// AllBlocksCleared adapt the engine's hooks (engine.KVEvents).
//
// # Subscriber
//
// Subscriber.Run(ctx) connects a SUB socket to one instance's publisher
// and hands every batch to its Sink in sequence order. A sequence number
// above the next expected one is a gap: the missing batches are asked from
// the replay socket and applied first; a number at or below the last one
// applied (a duplicate or a late batch) is dropped, except 0: the
// publisher restarted, so the instance is cleared and followed anew. All
// are counted (Stats). Without a replay socket a gap is counted and the sink is told
// to forget the instance (Cleared), as its view may be wrong.
//
// # Index
//
// Index is the router's view, fed by subscribers: per instance, the
// blocks it holds, named by our own block identity recomputed from each
// BlockStored's token ids and parent (so any publisher's hash function
// works: vLLM's integers, its SHA-256 bytes, ours). Matched(instance,
// blocks) is the number of leading prompt blocks (kvcache.HashBlocks of
// the prompt's tokens, as uint64 keys) the instance holds. Decode is the one
// decoder of network bytes; it is fuzzed.
package kvevents
