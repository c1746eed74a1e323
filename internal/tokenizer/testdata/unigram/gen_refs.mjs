// Reference token ids for the Unigram tokenizer.json test (refs.json): T5's
// tokenizer.json (t5.tokenizer.json.gz here: the file as published with a
// fine-tuned T5 in the GitHub repository AliAbdien/Fine-Tuning-T5-for-Question-Answering
// at commit 1631ca322d0343cd44ed885522906bf603f62d5c, T5's vocabulary,
// Apache-2.0 like T5) encoded by transformers.js's port
// (@lenml/tokenizers), and T5's spiece.model (same commit) by SentencePiece
// itself (WebAssembly), over the texts of ../sp/refs.json. With that
// commit's tokenizer.json, tokenizer_config.json and spiece.model here:
//   npm install @lenml/tokenizers@3.7.2 @sctg/sentencepiece-js@1.3.3
//   node gen_refs.mjs > refs.json
import * as sp from "@sctg/sentencepiece-js";
import { TokenizerLoader } from "@lenml/tokenizers";
import fs from "fs";
const texts = JSON.parse(fs.readFileSync("../sp/refs.json")).texts;
const tk = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync("tokenizer.json")),
  tokenizerConfig: JSON.parse(fs.readFileSync("tokenizer_config.json")),
});
const p = new sp.SentencePieceProcessor();
await p.loadFromB64StringModel(fs.readFileSync("spiece.model").toString("base64"));
process.stdout.write(JSON.stringify({
  json: texts.map((t) => tk.encode(t, { add_special_tokens: false })),
  model: texts.map((t) => Array.from(p.encodeIds(t))),
}) + "\n");
