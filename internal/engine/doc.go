// Package engine is the reference inference engine's core: a
// continuous-batching scheduler with chunked prefill, prefix caching,
// preemption by recompute and abort, driving a model over a paged KV cache,
// and calling a KV connector at the points where vLLM's v1 engine calls its
// KVConnectorBase_V1.
//
// # Using it
//
// Build a Config (Model is required; everything else has a default), call
// New, run Engine.Run(ctx) in one goroutine, and Submit requests from any
// goroutine; each Submit returns a Stream of Outputs. Abort(id) (or
// cancelling the ctx passed to Stream.Next) ends a request and frees its
// blocks. Engine.Step runs one step synchronously for tests (never together
// with Run). Stats reports blocks used/free/cached (and request counts)
// for leak checks and metrics.
//
// # Determinism
//
// The model computes every output element in one goroutine with a fixed
// loop order, parallelising only over rows, heads and output columns, never
// inside a reduction. A sequence's logits and KV are therefore bit-identical
// whatever else is in the batch and however its prompt is chunked; greedy
// generation is a pure function of the prompt. Sampling with temperature > 0
// uses a per-request generator seeded from SamplingParams.Seed (or the
// request id), so it is reproducible too. Every output token's logprob
// (log-softmax of the raw logits at the sampled id) is kept:
// ReqState.OutputLogprobs.
//
// # KV memory (what a connector moves)
//
// With Config.TP ranks (default 1; it must divide the model's KV heads),
// each rank has one contiguous region per layer holding only its KV heads
// (model.ForwardTP splits the heads and the MLP; outputs are bit-identical
// for every TP), allocated with Config.Allocator (func(size int) ([]byte,
// error); default: Go heap). Hand in memory that a transfer engine has
// registered to move blocks without copies. A region holds
// Layout.NumBlocks blocks; block b starts at b*Layout.BlockBytes(). Blocks
// are head major: for each of the rank's heads its K then its V, each
// float32[BlockSize][HeadDim], little endian, K after RoPE (kvcache.Layout;
// a head range of a block and a run of blocks are contiguous).
// KVCaches.Regions() reads and writes a block in its TP-independent form.
// Token position p of a request lives in block BlockIDs()[p/BlockSize],
// slot p%BlockSize. Block tables are kept in runs of consecutive ids where
// the pool allows (a table grows in place when the next ids are free, a new
// one takes a run large enough for its prompt: kvcache.Pool.AllocateFor),
// so a connector moves a run with one request. Engine.KVCaches() returns the regions (per rank), the Layout and a
// kvcache.Compat (model name, dtype, layers, kv heads, head dim, block size,
// weights fingerprint; not the TP size):
// two engines may exchange blocks only if their Compat.Hash() are equal.
// Cached blocks no request holds are reused in Config.Eviction order
// (internal/evict: "lru", the default, "tail-first" or "retention").
//
// # Connector contract
//
// Config.Connector (default NoopConnector) is called only from the step
// goroutine, in this order:
//
//	New:       RegisterKVCaches(kv)                       once
//	each step, first: new submissions join the waiting queue, aborts finish
//	  their requests (RequestFinished, see below)
//	each step, schedule phase:
//	  running requests get their next chunk (decode: 1 token); when blocks
//	  run out the newest running request is preempted (blocks freed, it
//	  recomputes later, its generated tokens are kept).
//	  for each waiting request, in arrival order, while budget remains:
//	    local prefix-cache lookup -> numLocal (full blocks, at most prompt-1 tokens)
//	    GetNumNewMatchedTokens(req, numLocal) -> (n, async, err)
//	      (not called, n = 0, when numLocal already covers the prompt)
//	      n == MatchPending: leave it waiting, ask next step
//	      err != nil:         the request fails (finish reason "error")
//	    allocate blocks for numLocal+n tokens (+ this step's chunk if !async)
//	    UpdateStateAfterAlloc(req, blockIDs, n)   req.NumComputedTokens() == numLocal here
//	    async: status WAITING_FOR_REMOTE_KVS, nothing computed for it
//	    !async: computed = numLocal+n (capped at prompt-1), chunk scheduled
//	  BuildConnectorMeta(schedulerOutput)                 every step, even empty
//	each step, execute phase:
//	  BindConnectorMeta(meta); StartLoadKV(ctx)
//	  forward, per layer l: Q/K/V projections, WaitForLayerLoad(ctx, l),
//	    write this step's K/V into the cache, SaveKVLayer(ctx, l), attention
//	    (the layer's K/V are final once written: a layer-wise transfer of
//	    layer l overlaps with the attention and MLP of l and later layers)
//	  (a step with no tokens runs no forward but still calls the rest)
//	  WaitForSave(ctx)
//	  GetFinished(finishedIDs) -> (doneSending, doneRecving)
//	  GetBlockIDsWithLoadErrors() -> invalid
//	  ClearConnectorMeta()
//	  UpdateConnectorOutput({doneSending, doneRecving, invalid})
//	update phase:
//	  doneRecving: WAITING_FOR_REMOTE_KVS -> WAITING with computed =
//	    numLocal+n; if that covers the whole prompt, prompt-1 (the last token
//	    is recomputed to get logits), unless the connector is a
//	    FirstTokenSource and FirstToken(req) hands over the first output
//	    token prefill sampled: then that token is the first output
//	    (streamed, GeneratedTokens and FirstTokensFromConnector count it,
//	    the sampling generator advances by one draw), computed = prompt and
//	    the next step is a decode step at position len(prompt) (it computes
//	    the first token's KV). Blocks of loaded tokens get hashed into
//	    the prefix cache.
//	  invalid blocks: with KVLoadFailurePolicy "recompute" (default) the
//	    request's computed tokens drop to the start of its first invalid block
//	    and it recomputes from there (a token sampled in the same step is
//	    dropped); with "fail" it finishes with an error (ErrKVLoad).
//	  doneSending: the delay-freed blocks of that request are freed.
//	  sampled tokens are appended; finished requests (stop, length, abort,
//	  error) get RequestFinished(req, blockIDs) -> (delayFree, params) exactly
//	  once; params go into the final Output (the HTTP response's
//	  kv_transfer_params); blocks are freed now unless delayFree.
//
// While any request waits for remote KV or has delay-freed blocks, Run keeps
// stepping every Config.PollInterval so transfers keep moving. A connector
// must report every async load and every delayed free eventually (with its
// own timeouts): the engine holds those blocks until it does.
//
// Abort and failure: RequestFinished is also called for aborted requests,
// including ones waiting for remote KV. A connector that may still write
// into (or read from) a finished request's blocks must return delayFree and
// report the id in doneSending once its transfer has stopped; otherwise the
// blocks are reused at once.
//
// Preemption: a preempted request loses its blocks and goes back to
// waiting; when it is admitted again GetNumNewMatchedTokens is called again
// (its local prefix cache lookup usually finds the blocks it had). A
// connector should answer 0 for a request whose remote KV it already
// delivered once (vLLM's connectors clear do_remote_prefill for this).
//
// # KV events
//
// Config.KVEvents (nil: none) hears the prefix cache change, as vLLM's KV
// events: AllBlocksCleared once in New; BlockStored when blocks get their
// hash (one call per run of newly cached blocks of a request, with the
// parent hash and the tokens); BlockRemoved once per step with the hashes
// evicted or dropped in it (kvcache.Pool.SetRemovedHook). The calls come
// from the step goroutine and must not block (kvevents.Publisher queues).
//
// ReqState values are owned by the step goroutine: read them only inside a
// hook call and copy what is needed later (block ids, tokens, params).
//
// Request.KVTransferParams (the HTTP request's kv_transfer_params) is
// visible to the connector through ReqState.KVTransferParams, together with
// the prompt tokens, the request id and the block table.
package engine
