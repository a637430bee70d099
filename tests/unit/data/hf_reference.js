#!/usr/bin/env node
// Reference for the HuggingFaceTokenizer parity test: Hugging Face's
// tokenizers library (its node binding, the same Rust code as the Python
// package) encodes each case with a tokenizer.json, special tokens added as
// the post-processor says.
//   node hf_reference.js NODE_MODULES TOKENIZER_JSON CASES OUT
// CASES: one case per line, the case's bytes in hex, decoded as UTF-8 the way
// node reads text (ill-formed sequences -> U+FFFD, tripod's policy too).
// OUT: one line per case, the ids separated by spaces.
'use strict';
const fs = require('fs');
const path = require('path');
const [mods, tokPath, casesPath, outPath] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(mods, 'tokenizers'));
(async () => {
  const tok = Tokenizer.fromFile(tokPath);
  const lines = fs.readFileSync(casesPath, 'latin1').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  const texts = lines.map((hex) => Buffer.from(hex, 'hex').toString('utf8'));
  const encs = await tok.encodeBatch(texts, { addSpecialTokens: true });
  fs.writeFileSync(outPath, encs.map((e) => e.getIds().join(' ')).join('\n') + '\n');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
