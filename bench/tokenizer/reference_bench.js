#!/usr/bin/env node
// Throughput of the JavaScript GPT-2 encoders on one core, line by line over
// a text file (empty lines skipped, as `tripod preprocess --input-format text`
// does): tiktoken (npm, Rust compiled to WASM, GPT-2 ranks) and gpt-3-encoder.
// With a tripod .bin, also checks that tiktoken's ids equal tripod's.
//   node reference_bench.js NODE_MODULES FILE [TRIPOD_BIN_FILE] [GPT3_ENCODER_MB]
'use strict';
const fs = require('fs');
const path = require('path');
const [mods, file, tripodBin, gpt3Mb] = process.argv.slice(2);
const { get_encoding } = require(path.join(mods, 'tiktoken'));
const gpt3 = require(path.join(mods, 'gpt-3-encoder'));

const text = fs.readFileSync(file, 'utf8');
const lines = text.split('\n').map((l) => l.replace(/\r$/, '')).filter((l) => l.length > 0);
const mb = Buffer.byteLength(text) / 1e6;

function timeIt(name, encode, lineList, megabytes) {
  const t0 = process.hrtime.bigint();
  let tokens = 0;
  const all = [];
  for (const l of lineList) {
    const ids = encode(l);
    tokens += ids.length;
    if (name === 'tiktoken') all.push(ids);
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ encoder: name, seconds: s, mb: megabytes, tokens,
                               mb_per_s: megabytes / s, mtokens_per_s: tokens / 1e6 / s }));
  return all;
}

const enc = get_encoding('gpt2');
const tik = timeIt('tiktoken', (l) => enc.encode(l), lines, mb);
if (tripodBin) {
  const buf = fs.readFileSync(tripodBin);
  const ids = new Uint16Array(buf.buffer, buf.byteOffset, buf.length / 2);
  let k = 0, same = true;
  for (const a of tik) {
    for (let i = 0; i < a.length && same; ++i) same = ids[k++] === a[i];
  }
  same = same && k === ids.length;
  console.log(JSON.stringify({ check: 'tripod ids == tiktoken ids', equal: same, tokens: ids.length }));
  if (!same) process.exitCode = 1;
}
// tiktoken's best case: the whole file in one call (no per-call overhead; the
// ids differ from the line-by-line ones only around the newlines).
{
  const t0 = process.hrtime.bigint();
  const n = enc.encode(text).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ encoder: 'tiktoken-whole-file', seconds: s, mb, tokens: n,
                               mb_per_s: mb / s, mtokens_per_s: n / 1e6 / s }));
}
// gpt-3-encoder is slow: time it on the first GPT3_ENCODER_MB megabytes only.
const limit = Number(gpt3Mb || 4.3) * 1e6;
const sub = [];
let bytes = 0;
for (const l of lines) {
  if (bytes >= limit) break;
  sub.push(l);
  bytes += Buffer.byteLength(l) + 1;
}
timeIt('gpt-3-encoder', (l) => gpt3.encode(l), sub, bytes / 1e6);
enc.free();
