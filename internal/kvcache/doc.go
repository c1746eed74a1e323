// Package kvcache is the paged KV cache of the reference engine: the memory
// layout (Layout, Regions), the block pool (Pool: reference counts,
// contiguous allocation, LRU reuse of cached blocks) and the block identity (BlockHash,
// RootHash, HashBlock).
//
// # Memory
//
// The KV heads are split across Layout.TP tensor-parallel ranks; each rank
// has one contiguous region per layer holding only its heads, allocated
// through an injectable Allocator so that a transfer engine can register it
// (or hand in memfd-backed memory) and move blocks without copies. Block b
// of a rank's layer region is the BlockBytes() bytes at offset
// b*BlockBytes(); inside it, head major, each of the rank's heads in turn:
// its K then its V, each float32[BlockSize][HeadDim], little endian, K after
// RoPE (BlockLayout, "head-major-v1"). A head range of one block is one
// contiguous byte run, and so is a run of blocks of a rank. The
// TP-independent form of a block (Regions.ReadBlock/WriteBlock,
// FullBlockBytes()) is every rank's block in rank order: the TP 1 block.
//
// # Pool
//
// Pool is a pure data structure owned by the scheduler. Blocks in use have a
// reference count > 0; a block shared by several requests through the prefix
// cache has one reference per request. A full block whose contents are
// computed gets a hash (SetHash); while it stays free and is not reallocated,
// Lookup finds it and Touch takes it back: that is prefix caching.
//
// Free blocks are plain (nothing reusable in them) or cached (a hash). Plain
// ones form a set ordered by id; cached ones a queue in the order they were
// freed. Allocate takes the lowest plain ids first, and only when none is
// left evicts cached blocks, oldest first (LRU); it returns ids sorted
// ascending. A fresh pool therefore gives a request one run of consecutive
// ids, and a cycled pool a few runs: a KV transfer moves each run of
// consecutive blocks with one request (an 8,192-token prompt took 2,808
// write requests with a plain free queue). Free releases a request's blocks
// tail first, so the head of a shared prefix is evicted last. The eviction
// order of cached blocks is an internal/evict policy: LRU (NewPool),
// TailFirst or Retention (NewPoolWith; engine.Config.Eviction; the pool
// gives Retention its size and each block's hash), docs/cache-policy.md.
//
// SetRemovedHook makes the pool report every hash that leaves the prefix
// cache (a cached block evicted for new contents, or DropHash): the
// engine's KV events.
//
// # Identity
//
// A full block is named by a SHA-256 chain over token ids, specified with
// test vectors in docs/kv-block-identity.md. The store and the router use the
// same identity.
package kvcache
