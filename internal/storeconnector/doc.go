// Package storeconnector is the KV-pool connector: it implements
// engine.Connector on top of the Mooncake Store, so that KV blocks one
// engine computed are reused by any engine of the same model later (prefix
// reuse across requests and nodes). `mooncake serve --kv-connector store
// --kv-connector-config '{"master":"127.0.0.1:50051"}'` runs it;
// docs/store-connector.md is the user manual.
//
// # Keys and objects
//
// One store object per full block, holding every layer: the block's bytes
// of layer 0 in its TP-independent form (head major over every KV head,
// each head's K then V: what a TP 1 engine holds; a TP N engine's ranks'
// blocks concatenated in rank order, kvcache.Regions.ReadBlock), then layer
// 1's, and so on (NumLayers * Layout.FullBlockBytes() bytes). The key is
//
//	KeyPrefix + Compat.Hash() + "/" + <block hash, 64 hex digits>
//
// (KeyPrefix defaults to "mooncake/kv/"). The block hash is the chained
// SHA-256 of docs/kv-block-identity.md (salted with the request's
// cache_salt), so equal keys mean equal prefixes; the compat hash scopes
// keys to one model, weights, dtype and block size, not the TP size: engines
// of any TP share the objects. One object per block
// rather than per (block, layer) makes NumLayers times fewer objects,
// master calls and replica lookups.
//
// # Save (prefill)
//
// BuildConnectorMeta lists, for every scheduled request, the full prompt
// blocks this step completes (blocks from the local prefix cache or loaded
// from the store are not saved again, nor blocks this connector knows it
// saved). WaitForSave, after the forward has written every layer, copies
// those blocks out of the KV memory into one buffer per block and queues the
// step's batch (bounded: Config.SaveQueue batches; a step whose batch does
// not fit is dropped and counted). Because of the copy the engine may free
// and reuse the blocks at once: a block can never be overwritten while it is
// being written to the store, and RequestFinished never delays a free for a
// save. The save worker (Run) writes each batch: one BatchExist, then one
// BatchPut of the missing blocks (ErrExists counts as saved).
//
// The KV regions are not registered with the store client's transfer
// engine: an object spans every layer's region, so it is not one contiguous
// piece of registered memory, and the copy is what decouples the save from
// the engine's block reuse. The copy is a memcpy of the step's new blocks,
// small next to the forward that produced them.
//
// # Load
//
// GetNumNewMatchedTokens counts the leading full prompt blocks beyond the
// local prefix-cache hit that the store holds (blocks remembered as saved by
// this connector, then one BatchExist bounded by Config.LookupTimeout) and
// answers them as asynchronous external tokens. A store error answers 0 (the
// request computes its prompt; it never fails) and skips lookups for
// Config.Backoff, so a store that went away costs one timeout. StartLoadKV
// starts one goroutine per request: one BatchGet, then each block's bytes
// are copied into the request's allocated blocks, layer by layer. When the
// goroutine ends GetFinished reports the request in doneRecving; blocks that
// could not be read (missing, evicted, corrupt, wrong size, timeout
// Config.LoadTimeout) are reported by GetBlockIDsWithLoadErrors, and the
// engine recomputes from the first of them (KVLoadFailurePolicy
// "recompute").
//
// A request that finishes (is aborted) while its load is in flight gets its
// load cancelled and its blocks delay-freed; they are reported in
// doneSending once the goroutine has stopped writing into them.
//
// # Layer-wise (Config.Layerwise)
//
// Loads become synchronous and per layer: the stored tokens are answered as
// computed (not async), the request computes the rest of its prompt in the
// same step, the load's goroutine (one BatchGet) copies the blocks layer by
// layer, and the forward's WaitForLayerLoad(l) waits for layer l only; the
// read overlaps with the first layer's projections, later layers' copies
// with earlier layers' compute, and the request skips the step it would
// spend in WAITING_FOR_REMOTE_KVS. Failed blocks are reported after the step
// and the engine drops that request's work and recomputes from the first
// of them; every load ends within its step (WaitForSave waits for it,
// bounded by LoadTimeout), so the engine's step, every request of the
// batch, waits for a slow store up to LoadTimeout: that is why it is off by
// default. Saves copy each layer's share of the step's blocks in
// SaveKVLayer (as soon as the layer's K/V are stored) and WaitForSave
// queues the batch once every layer was copied. The object is still one per
// block (all layers), so the store write itself starts after the step.
// layerwise.go has the details.
//
// # Concurrency
//
// New starts nothing; Run(ctx) is the save worker, for as long as the
// engine runs. Hooks run on the engine's step goroutine. Load goroutines and
// the save worker share state with it under one mutex; when Run's ctx ends
// (end it after the engine's Run has returned) it cancels the loads in
// flight, drops the saves not started, and returns once the loads stopped. Stats is a
// snapshot for tests and leak checks; Flush waits for the queued saves.
package storeconnector
