// Package tracesim replays Mooncake request traces through KV cache
// eviction policies and KV-aware prefill routers; `mooncake bench trace`
// is its command-line shell. The package is pure and deterministic: its
// only input is an io.Reader, it starts no goroutine, reads no clock and
// draws no random number, so the same trace and flags always give the same
// figures.
//
// # Traces
//
// A trace is JSON Lines, one request per line, as in Mooncake's FAST'25
// release:
//
//	{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, ...]}
//
// timestamp is in milliseconds from the start, lengths in tokens, and
// hash_ids holds one id per 512-token prompt block (BlockTokens) with
// chained identity: equal ids mean equal prompt prefixes up to and
// including that block. Reader decodes one line at a time (lines up to
// MaxLineBytes). A line that is not a JSON object, lacks one of the four
// fields, has a negative number or a non-integer where an integer belongs
// is an error wrapping ErrBadLine that names the line number ("bad trace
// line: line 7: missing "hash_ids""). Blank lines are skipped. Two
// conditions are warnings, counted in ReadStats and not fatal:
// len(hash_ids) != ceil(input_length/512) (LengthMismatch) and a timestamp
// below the previous line's (OutOfOrder). The simulations replay requests in
// timestamp order (Ordered: a stable sort, so equal timestamps keep file
// order).
//
// # Cache policies (SimulateCache)
//
// One global pool holds up to a capacity of blocks (Unlimited = 0: no
// limit). Per request, in timestamp order, the hits are the longest run of
// leading hash_ids already cached (the paper's definition: a block past the
// first miss cannot be reused without recomputing what precedes it). Then
// every block of the request is touched or inserted, in prompt order. The
// request's own blocks are pinned while it is served: they are never
// evicted to make room for its other blocks, and when the pool holds
// nothing else the rest of the request is simply not cached. The hit rate
// is sum(hits)/sum(len(hash_ids)).
//
//   - LRU evicts the block whose latest touch is oldest. Blocks of one
//     request are touched in prompt order, so its first block is the least
//     recent of them.
//
//   - LFU evicts the block touched by the fewest requests since it entered
//     the pool (the count restarts at 1 after an eviction); ties go to LRU.
//
//   - LengthAware is our reading of the paper's length-aware policy: evict
//     the block with the deepest position in its prompt first (position =
//     index in hash_ids at its latest touch; with chained identity a block
//     always has the same position). Shared system prompts and early turns
//     sit at low positions and stay; the tails of long prompts, which only
//     a request with the very same long prefix can reuse, go first. Ties go
//     to LRU.
//
//   - TailFirst evicts the tails of block chains before their heads. First
//     the partial last block of a prompt (its position's block differs in
//     any longer prompt, so only the very same prompt reuses it: 1% of
//     last blocks are reused on the conversation trace, about 40% of the
//     others); then the blocks of the least recent request (by their
//     latest touch), deepest first, so a chain shrinks from its tail and
//     never keeps a block whose parent is gone (LRU drops the head first,
//     leaving tails no request can hit). It is internal/evict's TailFirst
//     order, which the engine's block pool can use too
//     (TestCacheMatchesEvictCore checks that both give the same hits).
//
//   - Retention is internal/evict's Retention, run by that package's code
//     (Cache.Access feeds it each request as one group, a block's position
//     as its depth, its id as its identity): a request that extends an
//     earlier one's prompt (the next turn of a conversation) takes that
//     one's turn plus one; a block's level is the larger of its request's
//     turn and the times it came back while cached, capped at 3; it may
//     stay (level+1) pool sizes of block insertions, partial tails none;
//     the block due first leaves first.
//
//   - Belady (SimulateBelady, not in Policies: it reads the future) is
//     the offline yardstick: the block whose next use is farthest leaves
//     first (never used again first, ties deepest first), in a replay of
//     its own that shares no structure with the online policies.
//
//   - ClassCeiling (SimulateClassCeiling, not in Policies either: it is
//     fitted to the trace it reports on) is the second yardstick: the best
//     hit rate of a policy that knows a block only by its class (its
//     request's turn, the earlier requests that held it, its request's new
//     blocks, its depth) and its age, each class's time-to-next-use
//     statistics known in advance: a fractional knapsack of per-class
//     retentions under the capacity as an average (so an overestimate).
//     Between it and Belady lies what only knowledge of the future (which
//     prompt gets a next turn) buys.
//
// `mooncake bench trace` prints every policy per capacity with Belady's
// hit rate and the policy's share of the gap between LRU and Belady, and
// the class ceiling with its share;
// docs/cache-policy.md has the figures. GenerateAgent draws a tool-agent
// trace (AgentShape; `--synthetic agent`) with other statistics than the
// conversation trace, to judge a policy on a workload it was not built on.
//
// With an unlimited pool every policy gives the same hits, which IdealHits
// computes directly with a set (no cache structure) as a cross-check. The
// paper's Table 1 (arXiv trace, not ours) is available through
// PaperHitRate for side-by-side reports; the conversation trace's ideal is
// 0.366 against the arXiv trace's 0.51, so compare the shape of the curve.
//
// # Routing (SimulateRouting)
//
// RouteConfig.Instances prefill instances each keep their own cache of
// CapacityBlocks blocks (RouteConfig.InstancePolicy, LRU by default) and run prefills one at a time in arrival order.
// For each request the router sees, per instance, T_queue (seconds of
// prefill still queued: the instance is free at freeAt, so
// T_queue = max(0, freeAt - now)) and the instance's cached prefix length.
// T_prefill comes from CostModel:
//
//	n = uncached tokens, p = cached prefix tokens (prefix blocks x 512, at most input_length)
//	T_prefill = Fixed + PerToken*n + PerTokenPair*(n*p + n*n/2)
//
// Routers:
//
//   - round-robin: request k (in timestamp order) goes to instance k mod N.
//   - least-loaded: the smallest T_queue.
//   - cache-aware: the longest local prefix, ties to the smallest T_queue.
//     It ignores load, so when every request shares a first block (every
//     request of the conversation trace starts with id 0) the first
//     instance to cache that block wins every later comparison: all
//     traffic lands on one instance, whose hits equal one LRU pool of the
//     same size. That hot spot is what the conductor's queue term is for.
//   - conductor (Mooncake's rule): best = the longest prefix on any
//     instance (its holder is the lowest-index instance with it). For each
//     instance, if best - local > BalanceThresholdBlocks it would pull the
//     missing blocks from the holder, prefix = best and
//     T_transfer = blocks x 512 x KVBytesPerToken / BandwidthBytesPerSec;
//     else prefix = local and T_transfer = 0. It picks the lowest
//     TTFT_est = T_transfer + T_queue + T_prefill(input, prefix).
//
// Ties go to the lowest instance index. The chosen instance's TTFT is its
// TTFT_est (the model is the simulated truth), its freeAt becomes
// now + TTFT, and all the request's blocks enter its cache at dispatch (a
// later request on the same instance runs after it in FIFO order, so the
// blocks exist by then); pulled blocks are kept, so hot prefixes end up
// replicated, and the holder's pulled blocks count as used in its LRU.
// Simplifications: the transfer is serial with queueing and prefill (the
// paper's formula, no layer-wise overlap), a pull does not wait for the
// holder to finish computing the blocks, and decode is not modelled.
//
// With RouteConfig.EventsFed the router's view of each instance's cached
// prefix comes from the instances' KV events instead of reading their
// caches: every block a cache gains or loses becomes a vLLM BlockStored /
// BlockRemoved event (a trace block travels as a one-token block whose
// token is its id), batched per request, encoded and decoded with
// internal/kvevents' wire codec (both encodings) and applied to a
// kvevents.Index, as a proxy following real instances would. It reaches
// the same choices and hit rate as the bookkeeping (tested; `mooncake
// bench trace` prints both: 0.3365 for the conductor on the conversation
// trace either way). RouteConfig.Feed replaces that view with any
// PrefixFeed: internal/bench/conductortrace's runs a real `mooncake
// conductor` over ZMQ and HTTP, with the same hit rate again.
//
// With Reject set, a request whose TTFT_est on the chosen instance exceeds
// SLOSeconds is refused early (the paper's HTTP 429) and changes no state.
// RouteResult reports the hit rate (reused blocks, local or pulled, over
// blocks of served requests), the pulled share, mean and p90 TTFT (nearest
// rank), the share of all requests served within the SLO (rejected ones
// count as misses) and the rejection count. The defaults
// (DefaultRouteConfig) are assumptions, not fits: 10 ms + 60 us/token +
// 0.5 ns/token pair, 320 KiB of KV per token (a LLaMA-70B-sized model) and
// 20 GB/s between instances, which put the point where pulling an 8k-token
// prefix beats recomputing it near the paper's 6 GB/s.
package tracesim
