#!/usr/bin/env bash
# HuggingFaceTokenizer against the `tokenizers` library on a machine that has
# it (the GPU machine: no internet needed), with a tripod built elsewhere
# (scripts/gpu_check.sh --stage DIR; a CPU build is enough) or here:
#   scripts/hf_tokenizer_check.sh (--stage DIR | --tripod BIN) [--out DIR] [--big-mb MB]
# Runs scripts/hf_tokenizer_check.py (Llama 3, Qwen2 and GPT-2 style
# tokenizers trained at run time; exact ids of `tripod preprocess` against
# tokenizers' encode, then MB/s of both). Exit status: non-zero on any
# mismatch; the first differing document is in OUT/hf_tokenizer.log.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=""; BIN_TRIPOD=""; OUT=${OUT:-hf_tokenizer_out}; big_mb=50
while [[ $# -gt 0 ]]; do
  case $1 in
    --stage) stage=$2; shift 2 ;;
    --tripod) BIN_TRIPOD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --big-mb) big_mb=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
mkdir -p "$OUT"
summary="$OUT/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
if [[ -n $stage ]]; then
  source scripts/stage_env.sh
  use_stage "$stage" "${TMPDIR:-/tmp}/tripod_tok_stage"
fi
[[ -x $BIN_TRIPOD ]] || { note "no tripod binary (pass --stage DIR or --tripod BIN)"; exit 2; }
python3 scripts/hf_tokenizer_check.py "$BIN_TRIPOD" "$OUT/work" --big-mb "$big_mb" > "$OUT/hf_tokenizer.log" 2>&1
rc=$?
grep -E "^(tokenizers|PASS|FAIL|TIME|ALL PASS|FAILED)" "$OUT/hf_tokenizer.log" | tee -a "$summary"
[[ $rc -ne 0 ]] && sed -n '/^FAIL/,/^  tripod:/p' "$OUT/hf_tokenizer.log" | head -20
rm -rf "$OUT/work"/*.jsonl "$OUT/work"/*_big*  # large files
note "hf_tokenizer_check rc=$rc"
exit $rc
