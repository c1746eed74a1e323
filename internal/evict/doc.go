// Package evict is the eviction-order core shared by the KV cache
// simulations (internal/tracesim), the engine's block pool
// (internal/kvcache) and the store master (internal/master): a Policy
// holds the evictable items and names the next victim. It is pure: no
// clock, no goroutine, no I/O, not safe for concurrent use (its owner
// serialises calls).
//
// Items are KV blocks of prompt chains: block i of a prompt is only useful
// while blocks 0..i-1 of the same prompt are cached too (a prefix hit stops
// at the first missing block). Callers add the blocks of one request (or
// one release of a block table) as one group, with each block's depth (its
// index in the chain).
//
//   - LRU evicts in the order items were added: the least recently added
//     first. Within a group, the item added first goes first.
//   - TailFirst evicts partial tails first (Meta.Partial: the last,
//     not-full block of a prompt, which only the very same prompt can
//     reuse; 1% of them are reused on Mooncake's conversation trace against
//     about 40% of the other blocks), then the least recent group, and
//     inside a group the deepest item first: the tail of a chain leaves
//     before its head, so the pool does not keep a block whose parent it
//     already evicted (that block could never be hit). On the conversation
//     trace it is at or above LRU at every capacity (docs/cache-policy.md).
//   - Retention keeps a block longer the more often it, or the chain it
//     ends, has come back: a group that extends an earlier group's chain
//     (recognised by Meta.Hash, the content identity) takes that group's
//     turn plus one; an item's level is the larger of its group's turn and
//     its own comebacks while cached (capped at 3); it may stay (level+1)
//     pool sizes of insertions (the pool size: the largest Len, or
//     SetCapacity), partial tails none, and the item due first leaves
//     first. Without identities it orders as TailFirst without the
//     partial-first rule. Above LRU and TailFirst at every capacity on the
//     conversation trace (docs/cache-policy.md).
//
// New picks a policy by name (Kind); one behaviour suite
// (TestPolicyBehaviour) runs against all of them, and BenchmarkPolicy
// measures eviction decisions per second and heap bytes per tracked item.
package evict
