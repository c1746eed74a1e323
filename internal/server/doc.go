// Package server is the OpenAI-compatible HTTP API of the reference engine.
//
// Routes: POST /v1/completions, POST /v1/chat/completions (JSON or SSE
// streaming with "data: [DONE]"), GET /v1/models, GET /health (200 while
// serving, 503 before and during shutdown), GET /metrics (Prometheus text:
// time to first token and time per output token histograms, running and
// waiting requests, KV blocks used/free/cached, prefix-cache hit rate,
// token and request counters), POST /tokenize (vLLM's: {"prompt"} or
// {"messages"} to {"count", "max_model_len", "tokens", "token_strs"}, the
// ids the same request would run with, for routers that name KV blocks).
//
// Requests: prompt as a string (encoded with the byte-level tokenizer after
// <|bos|>) or as token ids; messages for chat (string content or text parts,
// rendered with the tokenizer's chat template); max_tokens (or
// max_completion_tokens), temperature (default 1; 0 = greedy), top_p, seed, stop
// (string or up to 4 strings; the matched stop string is not returned),
// stream and stream_options.include_usage, ignore_eos, cache_salt (prefix
// cache namespace), SGLang's bootstrap_host, bootstrap_port and
// bootstrap_room (integers as numbers or decimal strings, kept exact; folded
// into kv_transfer_params), kv_transfer_params (checked and completed by
// Config.PrepareKV, the connector's hook, when set: its errors are 400s,
// and it may cap an SGLang prefill half at one token; then handed to the
// engine's KV connector;
// what the connector returns from RequestFinished comes back as the
// response's top-level kv_transfer_params, as in vLLM), and the extension
// return_token_ids (the response carries prompt_token_ids and per-choice
// token_ids). An X-Request-Id header becomes the engine request id (the
// id a connector sees). Unknown fields, wrong types, n != 1, logprobs,
// penalties, echo, suffix and best_of are rejected.
//
// Errors are OpenAI-style JSON {"error": {"message", "type", "param",
// "code"}}: 400 for bad input (malformed JSON, wrong types, empty prompt,
// prompt longer than the context, max_tokens <= 0 or too large), 404 for an
// unknown model, 429 when the engine's waiting queue is full, 503 while
// shutting down, 500 for a generation that failed (with the connector's
// kv_load_error appended, for example a KV pull that failed under the
// fail policy). A client that disconnects aborts its request, which frees
// its KV blocks.
//
// New(cfg) builds a Server around an engine; Serve(ctx, ln) runs the
// engine and the HTTP server on ln (listen on 127.0.0.1:0 in tests) until
// ctx ends.
package server
