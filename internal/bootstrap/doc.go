// Package bootstrap is the bootstrap registry of a prefill instance and the
// pull side channel of the Mooncake P/D connector, on one HTTP port
// (DefaultPort 8998).
//
// The registry (Registry, pure) holds one engine id, the engine's KV
// compatibility hash, its TP size and KV block layout (SetTP), and its
// workers by (dp, tp, pp) rank with
// their transfer engine segment names. Routes:
//
//	GET  /query     -> QueryResponse; 503 until a worker registered
//	POST /register  RegisterRequest; 400 on another engine id, a rank
//	                registered at another address, a rank outside tp_size
//	POST /pull      PullRequest -> PullResponse (decode asks prefill to push
//	                a transfer's blocks; unknown fields and bad shapes -> 400)
//	POST /release   {"transfer_id"} -> {"known"} (decode will not pull)
//	GET  /health, GET /metrics (when Server.Metrics is set)
//	PUT  /route     RouteInfo: SGLang's registration of a prefill rank
//	GET  /route     ?prefill_dp_rank&target_tp_rank&target_pp_rank (older:
//	                engine_rank, target_dp_group): every rank -1 -> ServerInfo
//	                (sizes, page_size, kv_cache_dtype), a rank -> its
//	                RouteInfo (rank_ip, rank_port); 400 bad ranks, 404 an
//	                unknown rank, 503 nothing registered (SGLang's contract)
//
// A PullRequest carries the transfer id, the protocol version
// (ProtocolVersion, 2: head-major blocks), the decode engine's compatibility
// hash, its TP size, the ranks the pull covers (tp_rank, tp_ranks) and its
// KV layout, its segment name, the base address of each KV layer region of
// those ranks (rank major), the per-rank block stride,
// the prompt length, the first block index decode lacks and its destination
// block ids, and how long decode waits (timeout_ms). The Server bounds the
// Handler's context by timeout_ms; the handler answers done or failed with a
// code (CodeIncompatible, CodeUnknown, CodeTimeout, CodeTransfer,
// CodeAborted, CodePrefillError, CodeBadRequest). A done answer carries the
// prefill's aux data when it has one (PullResponse.Aux: the first output
// token it sampled and that token's logprob), so decode starts from the
// next position.
//
// Client is the matching HTTP client. DecodePull is the one decoder of
// network bytes with logic of its own; it is fuzzed.
package bootstrap
