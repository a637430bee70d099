#!/usr/bin/env bash
# Mixtral and Qwen2-MoE Hugging Face interop on the GPU machine (it has
# torch and transformers), with a tripod built elsewhere
# (scripts/gpu_check.sh --stage DIR) or here: scripts/hf_moe_check.py
# (random MixtralForCausalLM / Qwen2MoeForCausalLM saved with save_pretrained
# and imported, tripod-trained models exported and loaded by transformers:
# logits within 1e-4 and the same greedy ids; the float64 forward of
# tests/ckpt/hf_moe_forward.py against transformers). tripod runs on the CPU:
# the CUDA backend has no MoE ops yet. About a minute.
#
# usage: scripts/gpu_hf_moe_check.sh (--stage DIR | --tripod BIN) [--out DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
stage=""; BIN_TRIPOD=""; OUT=${OUT:-gpu_hf_moe_out}
while [[ $# -gt 0 ]]; do
  case $1 in
    --stage) stage=$2; shift 2 ;;
    --tripod) BIN_TRIPOD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
mkdir -p "$OUT"
summary="$OUT/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
if [[ -n $stage ]]; then
  source scripts/stage_env.sh
  use_stage "$stage" "${TMPDIR:-/tmp}/tripod_hf_moe_stage"
fi
[[ -x $BIN_TRIPOD ]] || { note "no tripod binary (pass --stage DIR or --tripod BIN)"; exit 2; }
note "transformers $(python3 -c 'import transformers; print(transformers.__version__)' 2>&1 | tail -1), torch $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)"
note "---- Hugging Face MixtralForCausalLM / Qwen2MoeForCausalLM import/export ----"
OMP_NUM_THREADS=$(nproc) timeout 600 python3 scripts/hf_moe_check.py "$BIN_TRIPOD" "$OUT/hf" > "$OUT/hf.log" 2>&1; rc=$?
grep -E "^(PASS|FAIL|ALL PASS|FAILED)" "$OUT/hf.log" | tee -a "$summary"
[[ $rc -eq 0 ]] || tail -30 "$OUT/hf.log" | tee -a "$summary"
note "hf_moe_check rc=$rc"
if [[ $rc -eq 0 ]]; then note "PASS gpu_hf_moe_check"; else note "FAIL gpu_hf_moe_check"; fi
exit $rc
