// Package pdconnector is the Mooncake prefill/decode connector: it
// implements engine.Connector (vLLM's KVConnectorBase_V1 hooks) for the
// roles producer (prefill), consumer (decode) and both, and moves KV blocks
// with the transfer engine. docs/pd.md is the user manual.
//
// # Protocol
//
// The proxy sends the prefill half with kv_transfer_params
// {do_remote_decode, transfer_id} and the decode half with
// {do_remote_prefill, transfer_id, remote_bootstrap_addr, remote_engine_id}.
//
// Every published variant is accepted (params.go, ParseRemote; docs/pd.md
// has a table): ours and vLLM's reworked connector (transfer_id,
// remote_bootstrap_addr as host:port or http://host:port); vLLM's example
// proxy (no transfer_id, bootstrap_server_host and bootstrap_server_port);
// vLLM's seed connector (remote_host and remote_port, which our prefill
// returns); SGLang's (bootstrap_host, bootstrap_port, bootstrap_room in the
// body, folded into the params by the server; PrepareParams turns them into
// this engine's half by its role). Without a transfer id the halves pair by
// the request id, which the server takes from X-Request-Id; an SGLang
// transfer is "sglang-room-<room>". The parsers (params.go) are the only
// code that reads the params' open map: the cores take RemoteParams and
// report typed LoadReports, and the answers are typed (answer.go) until one
// marshal step into the engine's map. A prefill half answers with the
// fields of every variant (transfer_id, remote_engine_id,
// remote_bootstrap_addr, remote_host, remote_port, tp_size,
// remote_block_ids), so whichever proxy forwards it, decode can pull.
// Malformed params are refused before the request is queued (CheckParams,
// through server.Config.PrepareKV: HTTP 400 naming the field). SGLang's
// decode learns the pull address from prefill's GET /route (checking page
// size and KV dtype); transfers by SGLang poll state are in the metrics
// mooncake_pd_kv_poll_transfers and mooncake_pd_kv_poll_total. Prefill
// ships aux data with every push, whatever the contract (its sampled first
// token and that token's logprob, PullResponse.Aux). When the pull brought
// the whole prompt (no local prefix hit covering it, no failure), decode
// hands the token to the engine (Connector.FirstToken, the engine's
// FirstTokenSource): it is decode's first output, and decode starts with a
// decode step at position len(prompt) instead of recomputing the last
// prompt position. Decode's response reports aux_first_token,
// aux_first_logprob, aux_first_token_match and first_token_from_prefill;
// mooncake_pd_first_token_total{source="prefill"|"decode"} counts where
// finished remote-prefill requests got their first token.
//
// The role's behaviour is composed of two halves (halves.go): producerHalf
// (prefill) and consumerHalf (decode) each implement the hooks their side
// needs; RoleBoth is both. The Connector's engine hooks delegate to them
// and never test the role.
//
//   - Prefill (RequestFinished): a finished prefill's blocks are held
//     (delay free) under its transfer id.
//   - Decode (GetNumNewMatchedTokens / UpdateStateAfterAlloc): the prompt
//     beyond the local prefix-cache hit arrives asynchronously; the blocks
//     are allocated, the request waits for remote KV, and StartLoadKV starts
//     a pull: GET /query on prefill's bootstrap registry (cached; compat hash
//     and protocol checked), then POST /pull with decode's segment, layer
//     addresses and destination blocks.
//   - Prefill (Pull, on the bootstrap port): checks compatibility, has the
//     transfer engine prepare for a decode peer it has not seen
//     (Mover.PreparePeer: open, map, dial, while the prefill computes), then
//     streams layer by layer (the default, stream.go and streamio.go): the
//     pull attaches to the transfer's prefill, and each layer's newly
//     complete blocks are written as soon as the engine stored the layer's
//     K/V (SaveKVLayer), while the next layers compute; with
//     Config.WholeRequest it waits (bounded by decode's deadline minus a
//     margin) for the prefill and writes all the blocks decode lacks. It
//     answers once all is written, and frees. The write plan (PlanWrites,
//     grouped by layer; PlanLayerWrites for one layer, which planLayer
//     wraps for a streamed layer and chunk) maps prefill's TP ranks onto
//     decode's: each decode rank gets exactly its KV heads from the prefill
//     ranks holding them. Blocks are head major, so with equal TP a run of
//     consecutive blocks is one contiguous extent, and with different TP a
//     head range of one block of one overlapping (prefill rank, decode
//     rank) pair is one; each layer's extents, block by block, go as ONE
//     scatter-gather WRITE (transfer.Request.Extents; a plain WRITE when
//     there is one extent), so the request count is the layer count
//     whatever the TP sizes and however the blocks lie; never one per
//     token. With grants, a scatter-gather WRITE no single pull grant
//     covers is split into plain WRITEs (pullGrants.attach).
//   - Decode (GetFinished): the pull's end is reported as done receiving;
//     on failure its blocks are reported invalid and the engine's
//     kv_load_failure_policy (recompute or fail) applies. RequestFinished
//     returns kv_transfer_params saying what happened (kv_load, bytes, times).
//
// Full prefix hit on decode: nothing is pulled, decode sends POST /release.
//
// # Cores and shell
//
// ProducerCore and ConsumerCore are pure state machines (no I/O, no clock:
// time is an argument) tested without sockets. ProducerCore frees a
// transfer's blocks on push done, on release (at once, or when the running
// push ends), or after AbortTimeout (480 s) if nobody asks; a release that
// arrives before the prefill finished frees it as soon as it does. Streamed,
// it also follows each pulled prefill through the engine's steps
// (Scheduled, LayerDone), queues per-layer writes for the attached pull
// (Attach, Next: complete blocks only, in layer order per step) and holds a
// streamed request's blocks until its pusher ended (abort, release and
// preemption mid-stream included).
// ConsumerCore tracks pulls, outcomes and invalid blocks; a request that ends
// while its pull runs keeps its blocks (delay free) until prefill has
// answered, so no write can land in reused blocks. Both take time from
// Config.Clock. Connector is the shell: it serves the bootstrap server, owns
// the pull, push and release goroutines (each bounded by a timeout), the
// metrics (Collectors, also on the bootstrap port's /metrics) and a mutex
// around the cores; the engine calls its hooks from one goroutine. The
// transfer engine is seen through Mover, the few methods the connector uses.
//
// # Grants
//
// With Config.Grants (the grant.Verifier of decode's transfer engine), a
// consumer mints, for each pull, one-shot WRITE grants for exactly the
// pull's destination blocks in every layer and rank it covers
// (PullRequest.Grants), and releases them when the pull ends; its engine
// refuses every other write into its KV cache. Prefill attaches to each
// WRITE the grant that covers it (grants.go). No key leaves decode.
//
// # Lifecycle
//
// New checks the config and builds the connector; it binds no port and
// starts no goroutine. Run(ctx, ln) serves the bootstrap registry, the pull
// side channel and /metrics on ln until ctx ends, then cancels the pulls,
// pushes and releases in flight and returns when every goroutine of the
// connector has ended. A consumer that serves nothing passes ln == nil; a
// producer (or both) needs a listener, and Config.BootstrapAddr: the
// address decode reaches the registry at (it goes into kv_transfer_params),
// usually ln.Addr().String(). Stop the engine (the hooks' caller) before
// Run's ctx ends. How to start one:
//
//	te, _ := transfer.Open(ctx, transfer.Config{LocalHostname: host})
//	ln, _ := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(bootstrap.DefaultPort)))
//	conn, err := pdconnector.New(pdconnector.Config{Role: pdconnector.RoleProducer,
//		Transfer: te, BootstrapAddr: ln.Addr().String()})
//	if err != nil { ... }
//	runCtx, stop := context.WithCancel(ctx)
//	runErr := make(chan error, 1)
//	go func() { runErr <- conn.Run(runCtx, ln) }() // consumer: conn.Run(runCtx, nil)
//	eng, _ := engine.New(engine.Config{..., Role: pdconnector.RoleProducer,
//		Connector: conn, Allocator: conn.Allocator()}) // calls RegisterKVCaches
//	... serve until done; stop the engine ...
//	stop()
//	err = <-runErr // every pull, push and release has ended
//	te.Close()
//
// # Memory
//
// Allocator returns transfer-engine managed (memfd) memory for the engine's
// KV regions, so a same-host peer writes them with one memcpy; regions from
// another allocator are registered with RegisterBytes in RegisterKVCaches.
// Layout and compatibility come from engine.KVCaches (every TP rank's
// regions are registered; the bootstrap registry lists one worker per rank
// and reports tp_size and kv_layout); CompatHash adds the protocol version
// to kvcache.Compat.Hash, which leaves out the TP size. A pull sends
// decode's TP size, block layout, per-rank block stride and every rank's
// layer addresses (rank major); prefill refuses, as incompatible with the
// reason, a TP that does not divide the KV heads, another layout or a
// stride that does not match.
package pdconnector
