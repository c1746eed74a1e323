// Package e2e holds the end-to-end tests of prefill/decode disaggregation:
// proxy + prefill + decode engines in this process (internal/cluster) and as
// separate processes of the real binary, checking that greedy output through
// the proxy equals a colocated engine token for token (also with partial and
// full prefix hits on decode), and the failure scenarios (pull timeout with
// recompute and fail policies, prefill freeing after its abort timeout,
// incompatible peers, client disconnect before and during the pull, a
// prefill killed mid-request, a dead prefill replaced and put back in
// rotation). Every scenario ends by asserting that no KV block is leaked on
// any engine.
//
// vllm_test.go drives our engines with the published clients' contracts
// (docs/pd.md): vLLM's example proxy flow through our stand-in
// (testdata/vllm_flow_proxy.py, standard library only), vLLM's real
// example proxy script when MOONCAKE_VLLM_PROXY names it (run unchanged by
// testdata/run_vllm_proxy.py; skipped otherwise), the seed and reworked
// vLLM shapes, SGLang's router flow (bootstrap room, GET /route, aux data,
// poll-state metrics), our proxy in every --protocol, and our engines' KV
// events feeding the proxy; completions and chat, streamed and not, equal
// to a colocated engine, and each contract's failures (a half that never
// arrives, mismatched or malformed params, an unknown bootstrap address)
// answered with a clear 4xx/5xx and no leaked block.
package e2e
