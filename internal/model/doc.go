// Package model is a Llama-architecture decoder in float32 on the CPU:
// token embedding, RMSNorm, rotary position embedding (Hugging Face
// rotate-half convention), grouped-query attention over a paged KV cache,
// SwiGLU MLP, tied or separate output head.
//
// # Weights
//
// Built-in configurations "tiny" (about 0.1 M parameters, for tests),
// "tiny-tp" (tiny with 4 KV heads, so it splits across 1, 2 or 4
// tensor-parallel ranks), "wide-kv" (tiny compute with the KV geometry of
// one layer of Llama-3-8B, 8 KV heads of 128, on 4 layers: 32 KiB of KV
// per token, for measuring KV transfers of a realistic size) and "small" (about 4.4 M parameters, the demo) get deterministic pseudo-random
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
//
// # Tensor parallelism and the reduction order
//
// ForwardTP(tp, ...) splits every layer across tp ranks as Megatron does:
// rank r owns KV heads [r*nkv/tp, (r+1)*nkv/tp) and their query heads
// (rows of q_proj, k_proj, v_proj; the KV it writes and reads, which the
// KV interface keeps per head: kvcache.Regions stores a rank's heads in its
// own regions), the matching columns of o_proj, and a slice of the MLP's
// intermediate dimension (rows of gate_proj and up_proj, columns of
// down_proj). Embedding, norms and the output head are replicated.
//
// The two row-parallel projections (o_proj, down_proj) are where TP changes
// a float sum. Their inner dimension is cut into G = NumKeyValueHeads fixed
// reduction groups (KV head g's query heads for o_proj; intermediate
// elements [g*I/G, (g+1)*I/G) for down_proj), whatever tp is. Each group's
// partial is one dot call per output element (the same kernel and order),
// and the all-reduce adds the G partials in group order:
// x += ((p0 + p1) + p2) + .... A rank owns whole groups (tp divides G), so
// one rank and tp ranks run exactly the same floating-point operations in
// the same order: logits and KV are bit-identical for every tp that divides
// the KV heads (TestForwardTPBitIdentical; ErrTP otherwise). With one KV
// head (G = 1) this is the plain matmul. Ranks run one after another on
// the pass's workers; running them concurrently would not change a bit.
package model
