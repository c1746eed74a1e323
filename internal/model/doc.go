// Package model is a Llama-architecture decoder in float32 on the CPU:
// token embedding, RMSNorm, rotary position embedding (Hugging Face
// rotate-half convention), grouped-query attention over a paged KV cache,
// SwiGLU MLP, tied or separate output head.
//
// # Weights
//
// Built-in configurations "tiny" (about 0.1 M parameters, for tests) and
// "small" (about 4.4 M parameters, the demo) get deterministic pseudo-random
// weights from NewBuiltin(name, seed): the same seed gives the same bits on
// every machine, so no download is ever needed. Save writes a Hugging Face
// style directory (config.json + model.safetensors, Llama tensor names, F32,
// F16 or BF16); Load reads one back, including real Llama-family
// checkpoints in a single safetensors file. Unsupported features (sharded
// files, rope_scaling, biases, other activations, other dtypes, unknown
// tensors) fail with ErrUnsupported and say which feature.
//
// # Batch and chunk invariance
//
// Forward computes every output element in exactly one goroutine with one
// fixed reduction order (the dot kernel), spreading work only over rows,
// output columns and (row, head) pairs, never splitting a sum. Attention for
// a token at position p always reads keys 0..p from the cache in ascending
// order, including the keys this pass just wrote. So a sequence's logits and
// the K/V it writes are bit-identical whatever else is in the batch and
// however its prompt is split into chunks.
package model
