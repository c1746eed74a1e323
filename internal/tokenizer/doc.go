// Package tokenizer is the engine's byte-level tokenizer. Text is UTF-8;
// every byte is one token whose id is the byte value (0..255). Four
// specials follow: 256 <|bos|>, 257 <|eos|>, 258 <|pad|>, 259 <|sep|>, for a
// vocabulary of 260. Prompts built from text start with <|bos|>; the chat
// template is "<|bos|>" then, per message, role "\n" content "<|sep|>", then
// "assistant\n". Decoding drops specials; Stream decodes incrementally
// without splitting a UTF-8 character. It needs no files, so every model
// with a vocabulary of at least 260 can use it; Load rejects checkpoints
// that ship another tokenizer with ErrUnsupported.
package tokenizer
