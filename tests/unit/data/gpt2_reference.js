#!/usr/bin/env node
// Reference GPT-2 encoder for the parity tests: runs gpt-3-encoder's
// encode() (the JavaScript port of OpenAI's encoder.py) on each case.
//   node gpt2_reference.js PACKAGE_DIR CASES OUT
// CASES: one case per line, the case's bytes in hex. The bytes are decoded as
// UTF-8 the way node reads text files (ill-formed sequences -> U+FFFD).
// OUT: one line per case, the ids separated by spaces.
'use strict';
const fs = require('fs');
const path = require('path');
const [pkg, casesPath, outPath] = process.argv.slice(2);
const { encode } = require(path.resolve(pkg, 'Encoder.js'));
const lines = fs.readFileSync(casesPath, 'latin1').split('\n');
if (lines.length && lines[lines.length - 1] === '') lines.pop();
const out = [];
for (const hex of lines) {
  const text = Buffer.from(hex, 'hex').toString('utf8');
  out.push(encode(text).join(' '));
}
fs.writeFileSync(outPath, out.join('\n') + '\n');
