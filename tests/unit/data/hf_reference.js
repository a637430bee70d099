#!/usr/bin/env node
// Reference for the HuggingFaceTokenizer parity test: Hugging Face's
// tokenizers library (its node binding, the same Rust code as the Python
// package) encodes each case with a tokenizer.json, special tokens added as
// the post-processor says.
//   node hf_reference.js NODE_MODULES TOKENIZER_JSON CASES OUT
// With --pieces REGEX_FILE in place of TOKENIZER_JSON: the pre-tokenizer
// pieces of Split(Regex, Isolated) instead, from the offsets of a WordLevel
// model that knows no word (one <unk> per piece).
// CASES: one case per line, the case's bytes in hex, decoded as UTF-8 the way
// node reads text (ill-formed sequences -> U+FFFD, tripod's policy too).
// OUT: one line per case, the ids (or the pieces in hex) separated by spaces.
'use strict';
const fs = require('fs');
const path = require('path');
const args = process.argv.slice(2);
const pieces = args[1] === '--pieces';
if (pieces) args.splice(1, 1);
const [mods, tokPath, casesPath, outPath] = args;
const { Tokenizer } = require(path.resolve(mods, 'tokenizers'));
(async () => {
  const tok = pieces
    ? Tokenizer.fromString(JSON.stringify({
      version: '1.0', normalizer: null, added_tokens: [], post_processor: null, decoder: null,
      pre_tokenizer: { type: 'Split', pattern: { Regex: fs.readFileSync(tokPath, 'utf8') }, behavior: 'Isolated', invert: false },
      model: { type: 'WordLevel', vocab: { '<unk>': 0 }, unk_token: '<unk>' },
    }))
    : Tokenizer.fromFile(tokPath);
  const lines = fs.readFileSync(casesPath, 'latin1').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  const texts = lines.map((hex) => Buffer.from(hex, 'hex').toString('utf8'));
  const encs = await tok.encodeBatch(texts, { addSpecialTokens: true });
  const line = (e, i) => {
    if (!pieces) return e.getIds().join(' ');
    const cps = Array.from(texts[i]);  // offsets count code points
    return e.getOffsets().map(([a, b]) => Buffer.from(cps.slice(a, b).join(''), 'utf8').toString('hex')).join(' ');
  };
  fs.writeFileSync(outPath, encs.map(line).join('\n') + '\n');
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
