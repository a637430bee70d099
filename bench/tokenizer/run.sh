#!/usr/bin/env bash
# GPT-2 tokenizer throughput on the KJV corpus x10 (43 MB), in one run on one
# machine: tripod preprocess (1 worker, and all cores), tripod's tokenizer
# in-process (one core), tiktoken (npm, WASM; per line and whole file) and
# gpt-3-encoder (per line, on the first 4.3 MB: it is slow). Also checks that
# tripod's ids equal tiktoken's. HuggingFaceTokenizer is timed on GPT-2's
# files written as tokenizer.json (gpt2_as_hf.py) with GPT-2's pre-tokenizer
# (its preprocess output must equal GPT2BPETokenizer's byte for byte) and with
# Llama 3's (Split regex, ignore_merges). Each measurement is the best of REPEATS,
# interleaved so that load from other processes hits all of them alike.
#
#   bench/tokenizer/run.sh [BUILD_DIR] [REPEATS]      (default: build 3)
# Needs: node + npm (npm installs tiktoken and gpt-3-encoder into
# ${XDG_CACHE_HOME:-$HOME/.cache}/tripod/bench-node), bible (bible-kjv).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
REPEATS="${2:-3}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/tripod"
MODS="$CACHE/bench-node"
eval "$("$ROOT/scripts/get_gpt2_vocab.sh")"
if [[ ! -d "$MODS/node_modules/tiktoken" || ! -d "$MODS/node_modules/gpt-3-encoder" ]]; then
  mkdir -p "$MODS"
  (cd "$MODS" && npm install --no-audit --no-fund --silent tiktoken@1 gpt-3-encoder@1.1.4)
fi
cmake --build "$BUILD" --target tripod tokenizer_bench >/dev/null
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
bible -l100000 gen1:1-rev22:21 > "$WORK/kjv.txt"
for _ in $(seq 10); do cat "$WORK/kjv.txt"; done > "$WORK/kjv10.txt"
NPROC="$(nproc)"

python3 "$ROOT/bench/tokenizer/gpt2_as_hf.py" "$VOCAB" "$MERGES" gpt2 "$WORK/hf_gpt2.json"
python3 "$ROOT/bench/tokenizer/gpt2_as_hf.py" "$VOCAB" "$MERGES" llama3 "$WORK/hf_llama3.json"

preprocess() {  # workers [tokenizer.json] -> "wall_s cpu_s reported_MB/s"
  local tok=(--tokenizer-type GPT2BPETokenizer --vocab-file "$VOCAB" --merge-file "$MERGES") out="$WORK/kjv10_w$1"
  if [[ -n "${2:-}" ]]; then tok=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$2"); out="$WORK/kjv10_hf"; fi
  /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$BUILD/tripod" preprocess --input "$WORK/kjv10.txt" \
    --input-format text --output-prefix "$out" "${tok[@]}" --workers "$1" --no-progress > "$WORK/log" 2>&1
  local mbs; mbs="$(grep -o '[0-9.]* MB/s' "$WORK/log" | tail -1 | cut -d' ' -f1)"
  read -r wall user sys < "$WORK/time"
  echo "$wall $(calc "$user + $sys") $mbs"
}

calc() { awk "BEGIN { print $1 }"; }
declare -A best
keep() {  # name value: keep the maximum
  if [[ -z "${best[$1]:-}" ]] || awk -v a="$2" -v b="${best[$1]}" 'BEGIN { exit !(a > b) }'; then best[$1]="$2"; fi
}
MB="$(stat -c %s "$WORK/kjv10.txt" | awk '{print $1 / 1e6}')"
for r in $(seq "$REPEATS"); do
  read -r wall cpu mbs <<<"$(preprocess 1)"
  keep "tripod preprocess --workers 1 (pipeline MB/s)" "$mbs"
  keep "tripod preprocess --workers 1 (MB per CPU-second, load included)" "$(calc "$MB / $cpu")"
  read -r wall cpu mbs <<<"$(preprocess "$NPROC")"
  keep "tripod preprocess --workers $NPROC (pipeline MB/s)" "$mbs"
  line="$("$BUILD/bench/tokenizer/tokenizer_bench" "$VOCAB" "$MERGES" "$WORK/kjv10.txt" 1 encode)"
  keep "tripod tokenizer in-process, 1 thread (MB/s)" "$(echo "$line" | sed 's/.*encode \([0-9.]*\) MB.*/\1/')"
  read -r wall cpu mbs <<<"$(preprocess 1 "$WORK/hf_gpt2.json")"
  keep "tripod preprocess --workers 1, HuggingFaceTokenizer GPT-2 (pipeline MB/s)" "$mbs"
  cmp -s "$WORK/kjv10_hf_text_document.bin" "$WORK/kjv10_w1_text_document.bin" ||
    { echo "HuggingFaceTokenizer (GPT-2 tokenizer.json) ids differ from GPT2BPETokenizer's" >&2; exit 1; }
  for style in gpt2 llama3; do
    line="$("$BUILD/bench/tokenizer/tokenizer_bench" --hf "$WORK/hf_$style.json" "$WORK/kjv10.txt" 1)"
    keep "tripod HuggingFaceTokenizer in-process, $style pre-tokenizer, 1 thread (MB/s)" \
      "$(echo "$line" | sed 's/.*encode \([0-9.]*\) MB.*/\1/')"
  done
  node "$ROOT/bench/tokenizer/reference_bench.js" "$MODS/node_modules" "$WORK/kjv10.txt" \
    "$WORK/kjv10_w1_text_document.bin" 4.3 > "$WORK/ref.json"
  grep -q '"equal":true' "$WORK/ref.json" || { echo "tripod ids differ from tiktoken's" >&2; cat "$WORK/ref.json" >&2; exit 1; }
  while read -r l; do
    name="$(echo "$l" | sed -n 's/.*"encoder":"\([^"]*\)".*/\1/p')"
    [[ -z "$name" ]] && continue
    keep "$name (MB/s)" "$(echo "$l" | sed 's/.*"mb_per_s":\([0-9.e+-]*\).*/\1/')"
  done < "$WORK/ref.json"
done
TOKENS="$(grep -o '"tokens":[0-9]*' "$WORK/ref.json" | head -1 | cut -d: -f2)"
echo "KJV x10: $MB MB, $TOKENS GPT-2 tokens (ids identical to tiktoken), best of $REPEATS, load $(cut -d' ' -f1-3 /proc/loadavg)"
TIK="${best[tiktoken-whole-file (MB/s)]}"
printf "| %-66s | %8s | %9s | %s |\n" "measurement" "MB/s" "M tok/s" "x tiktoken (whole file)"
for k in "${!best[@]}"; do
  v="${best[$k]}"
  printf "| %-66s | %8.1f | %9.2f | %.1f |\n" "$k" "$v" "$(calc "$v * $TOKENS / ($MB * 1000000)")" "$(calc "$v / $TIK")"
done | sort -t'|' -k3 -rn
