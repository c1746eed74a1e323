// Package proxy is the OpenAI-compatible front door of a prefill/decode
// (P/D) disaggregated cluster: `mooncake proxy` and the proxy inside
// `mooncake up`.
//
// # Request flow
//
// For each POST /v1/completions or /v1/chat/completions the proxy:
//
//  1. parses the body as a JSON object (400 otherwise; 413 over MaxBodyBytes);
//  2. picks a healthy prefill instance (default policy kvcache-aware) and a
//     healthy decode instance (default least-loaded); 503 with an OpenAI-style
//     error object naming the role when none is healthy;
//  3. mints transfer_id "xfer-<uuid>" and sends both halves at the same time:
//     to prefill the request with max_tokens=1, stream=false and
//     kv_transfer_params {do_remote_decode:true, do_remote_prefill:false,
//     transfer_id}; to decode the original request plus kv_transfer_params
//     {do_remote_prefill:true, do_remote_decode:false, remote_bootstrap_addr,
//     remote_engine_id, transfer_id};
//  4. relays decode's status, headers and bytes unchanged, flushing after
//     every read (SSE passthrough), adding the header X-Transfer-Id.
//
// The prefill answer is only status-checked. If prefill refuses the request
// as malformed (4xx) before decode has answered, decode is cancelled and the
// client gets prefill's answer. Other prefill failures are left to decode's
// connector, which never waits for ever (it fails the request or recomputes,
// by its policy). If the decode instance cannot be reached the client gets
// 502, the instance leaves rotation and the prefill half is cancelled and
// released. If the client disconnects, both upstream requests are cancelled
// and the prefill instance's bootstrap registry is told to release the
// transfer (POST /release {"transfer_id"}), so no KV block is stranded.
//
// # Protocols
//
// Config.Protocol (--protocol) chooses what step 3 sends, so the proxy can
// front real vLLM or SGLang instances (BuildHalves; docs/pd.md has the exact
// bodies): mooncake (ours, above); vllm (vLLM's example proxy: a uuid in
// X-Request-Id of both halves, prefill {do_remote_decode:true,
// do_remote_prefill:false}, decode {do_remote_decode:false,
// do_remote_prefill:true, bootstrap_server_host, bootstrap_server_port});
// vllm-transfer-id (vLLM's reworked connector: transfer_id,
// remote_bootstrap_addr "http://HOST:PORT", remote_engine_id from /query in
// our shape or vLLM's {"<dp>": {engine_id, ...}}); vllm-seed (prefill first
// with {do_remote_decode:true}, its answer's kv_transfer_params forwarded
// to decode unchanged, same X-Request-Id); sglang (the same body to both,
// with bootstrap_host, bootstrap_port and a random 63-bit bootstrap_room).
// X-Transfer-Id and releases name the pairing key (transfer id, request
// id, or sglang-room-<room>). The prefill health check asks /query for
// mooncake and vllm-transfer-id, the bootstrap's /health for sglang, and
// only the engine's /health for vllm and vllm-seed.
//
// # KV events
//
// A prefill spec may add ",events=tcp://HOST:PORT[,replay=tcp://HOST:PORT]":
// Run then follows that instance's vLLM KV events (kvevents.Subscriber,
// gaps replayed) into a kvevents.Index, and the kvcache-aware and conductor
// policies take the cached prefix from it (KVAwareConfig.Matched) instead of
// their own bookkeeping; prompts are then tokenized as our engines do
// (PromptTokens, the byte-level tokenizer) and cut into EventBlockSize
// (16) token blocks in our block identity. EventIndex and EventStats expose
// it, and /metrics: mooncake_proxy_kv_event_batches_total{instance,result}
// (applied, gap, replayed, dropped, bad) and mooncake_proxy_kv_event_blocks.
//
// # Remote indexer and tokenizers
//
// Config.Indexer (--indexer-url) points the prefill policy at a KV cache
// indexer speaking Mooncake's Indexer API (`mooncake conductor`,
// Mooncake's, Dynamo's): per request one POST /query with the prompt's
// token ids; its tiered answer (GPU, CPU, DISK per instance, a prefill
// spec's id= naming the instance there) becomes Load.Cached in blocks, and
// the policies weigh the tiers (kvcache-aware: TierWeights; conductor: the
// load time of the host and disk parts, CostModel.Load, where loading
// beats recomputing). A failed query routes without it (counted).
// Config.Tokenizer picks how prompts become token ids (tokens.go): our
// byte-level tokenizer, the engine's POST /tokenize, or the model's
// tokenizer.json or tokenizer.model (tokenizer.LoadFile: byte-level BPE
// or SentencePiece; chat requests still ask the engine).
//
// # Instances and health
//
// A decode instance is a base URL. A prefill instance is a base URL,
// optionally followed by ",bootstrap=HOST:PORT" (default: the URL's host at
// port 8998). Every HealthInterval each instance is probed: GET /health must
// answer 200, and for prefill GET http://BOOTSTRAP/query must return its
// engine_id and at least one registered worker. An instance leaves rotation
// after FailAfter consecutive failed probes, or at once when a request cannot
// connect to it; one successful probe puts it back (no permanent blacklist).
// Instances start out of rotation until their first good probe.
//
// # Policies
//
// Policy is a pure interface (no I/O, no clock) of two methods: Plan picks
// a candidate and says what it predicts there (TTFT, queue, prefill, cached
// prefix: zero for policies that predict nothing), Dispatch records where
// the request went and returns the func to call when it ended. Every policy
// fits it, the conductor included, so routing (route.go) treats them alike:
// round-robin, least-loaded
// (fewest in-flight requests, ties shared) and kvcache-aware, Mooncake's
// conductor reduced to what a proxy can know: prompts are cut into 64-byte
// text blocks hashed in a chain, the proxy remembers (LRU) which blocks it
// sent to which instance, and picks the lowest
// InFlight*QueueCostBlocks + unmatched blocks.
//
// Conductor (--policy conductor, prefill only) is the paper's rule with a
// time model: TTFT_est = T_queue + T_prefill(n, p), where p is the cached
// prefix in tokens (matched blocks x BlockBytes: a byte is a token for our
// byte-level tokenizer), n the rest of the prompt, T_prefill the CostModel
// Fixed + PerToken*n + PerTokenPair*(n*p + n*n/2) (assumed coefficients,
// Config.Cost), and T_queue the sum of the predicted T_prefill of requests
// dispatched to the instance whose prefill half has not ended. Dispatch
// hands the caller a done func that removes the request's share when the prefill
// half ends, however it ends, so the queue cannot leak. With Config.TTFTSLO
// > 0 a request whose best TTFT_est exceeds it gets 429 (rate_limit_error)
// before any upstream is contacted, counted in
// mooncake_proxy_ttft_slo_rejected_total.
//
// # Endpoints
//
// /v1/completions, /v1/chat/completions, /v1/models (from a decode instance),
// /health (200 when each role has a healthy instance, JSON per instance),
// /metrics (Prometheus text: requests by endpoint and code, upstream errors,
// 503s by role, client disconnects, decode first-byte latency, per-instance
// health and in-flight gauges), /api/summary (summary.go: SummaryJSON, the
// counters above as JSON with the P/D pairs in flight and each instance's
// engine metrics, read from its /metrics when asked, ScrapeTimeout each)
// and the live dashboard page at /dashboard/ (internal/dashboard; /
// redirects to it). Errors are OpenAI error objects (internal/httpjson),
// the same shape as the engine's.
//
// # Files
//
// proxy.go (Proxy, New, Run, Close), health.go (probes, rotation, /health),
// route.go (candidates and the policy's choice), handlers.go (the HTTP
// mux, request reading, relaying), exchange.go (one P/D request: both
// halves, disconnects, releases), protocol.go (what each protocol sends
// upstream, typed), prompt.go (the prompt as text and tokens, for prefix
// hashing), tokens.go (the configured tokenizer), indexer.go (the remote
// indexer client), events.go (following KV events), metrics.go, summary.go.
//
// # Lifecycle
//
// New(cfg) binds nothing and starts nothing. Run(ctx, ln) runs the health
// checks and serves on ln until ctx ends, then cancels the background
// upstream requests (a prefill half outlives its client until its answer
// or RequestTimeout; releases) and returns once every goroutine the proxy
// started has exited. Tests may serve Handler themselves (CheckNow for
// health) and call Close, which does Run's last step.
package proxy
